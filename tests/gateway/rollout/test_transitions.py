"""Rollout progress read back from the store is obeyed only as a move of the step plan, under
a fencing token at least the current one: forged "promoted" and step -100 are refused, what
the leader really decided (steps, an operator's promote) is followed."""

from __future__ import annotations

import msgspec
import orjson

from gateway.rollout.progress import Progress, rollout_key
from gateway.rollout.transitions import legal
from gateway.state.decisions import Decision, DecisionBook
from gateway.state.lease import Lease, fenced_version
from tests.gateway.rollout.test_controller import CANARY, Fleet, agree
from tests.support.clock import FakeClock

KEY = rollout_key("digits")


def pair() -> tuple[Fleet, Fleet]:
    """Gateway A decides; gateway B reads A's decisions back as from a store, vetted."""
    clock = FakeClock()
    a, b = Fleet(clock, DecisionBook("gw-a")), Fleet(clock, DecisionBook("gw-b"))
    b.book.vet = b.rollouts.vet
    a.rollouts.activate()
    sync(a, b)
    b.rollouts.activate()
    return a, b


def sync(a: Fleet, b: Fleet, stored: dict[str, Decision] | None = None) -> list[Decision]:
    fresh = b.book.observe(stored if stored is not None else dict(a.book.known), a.clock.wall())
    b.rollouts.tick()
    return fresh


def forged(a: Fleet, **change: object) -> Decision:
    """A's stored progress, edited as someone with write access to the store would."""
    real = a.book.known[KEY]
    doc = orjson.loads(real.reason)
    doc.update({k: v for k, v in change.items() if k in ("step", "trail")})
    action = str(change.get("action", real.action))
    version = int(str(change.get("version", real.version + 1)))
    return msgspec.structs.replace(
        real, action=action, reason=orjson.dumps(doc).decode(), version=version, origin="gw-x"
    )


def test_forged_promoted_progress_is_refused_and_nothing_is_handed_over() -> None:
    a, b = pair()
    assert b.state()["phase"] == "canary"
    asked: list[list[str]] = []
    b.rollouts.hand_over = lambda: asked.append(b.rollouts.promoted())
    for change in ({"action": "promoted"}, {"action": "promoted", "step": 2}):
        fake = forged(a, **change, version=b.book.known[KEY].version + 1)
        assert sync(a, b, {KEY: fake}) == []
        assert (b.state()["phase"], b.state()["step"]) == ("canary", 0)
        # B decides alone here, so it writes its own progress again, above the forged one
        mine = b.book.known[KEY]
        assert mine.origin == "gw-b" and mine.supersedes(fake)
        assert [d.origin for d in b.book.take_unsent()] == ["gw-b"]  # never the forged one
    assert asked == [] and b.book.rejects.counts[("store", "progress")] == 2


def test_a_step_outside_the_plan_is_refused_and_requests_are_still_planned() -> None:
    a, b = pair()
    for step in (-100, 3, 10**6):
        assert sync(a, b, {KEY: forged(a, step=step)}) == []
    assert b.state()["step"] == 0
    b.rollouts.plan("digits")  # no IndexError
    assert b.rollouts.snapshot()["rollouts"]["digits"]["share_percent"] == 10


def test_progress_with_a_fencing_token_below_the_current_one_is_refused() -> None:
    a, b = pair()
    b.rollouts.leased("digits", Lease(False, 5, "gw-a"))
    trail = [
        *orjson.loads(a.book.known[KEY].reason)["trail"],
        {"action": "pause", "phase": "paused", "step": 0},
    ]
    stale = forged(a, action="paused", trail=trail, version=fenced_version(4) + 7)
    assert sync(a, b, {KEY: stale}) == []
    assert b.state()["phase"] == "canary"
    current = msgspec.structs.replace(stale, version=fenced_version(5) + 1)
    assert sync(a, b, {KEY: current}) == [current]  # the same move under the current token
    assert b.state()["phase"] == "paused"


def test_the_leaders_real_steps_and_an_operators_promote_are_followed() -> None:
    a, b = pair()
    agree(a, 40)
    a.clock.advance(31)
    a.rollouts.tick()  # A advances to step 1 ...
    agree(a, 40)
    a.clock.advance(31)
    a.rollouts.tick()  # ... and to step 2, both before B's next pull
    assert a.state()["step"] == 2
    assert len(sync(a, b)) == 1
    assert (b.state()["phase"], b.state()["step"]) == ("canary", 2)
    a.rollouts.act("digits", "pause", "alice", "")
    a.rollouts.act("digits", "promote", "bob", "urgent")
    sync(a, b)
    assert b.state()["phase"] == "promoted"


def test_a_fork_is_replayed_from_the_entry_both_share() -> None:
    a, b = pair()
    before = b.rollouts.runs["digits"].progress
    assert before is not None
    agree(a, 40)
    a.clock.advance(31)
    a.rollouts.tick()
    after = a.rollouts.runs["digits"].progress
    assert after is not None
    ours = before.then("paused", 0, 1.0, {"action": "pause", "phase": "paused", "step": 0})
    assert legal(ours, after, CANARY) is None  # A's step, from where B paused: a real move
    jump = Progress("canary", 2, after.declared, 1.0, after.trail)
    assert legal(before, jump, CANARY) is not None  # its trail ends at step 1, not 2

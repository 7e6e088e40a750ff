"""Rollouts on a fake clock: start, steps on evidence, rollback, operators, durable progress."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gateway.config.models import GatewayConfig, ModelConfig
from gateway.config.rollout import RolloutConfig
from gateway.errors import Conflict
from gateway.rollout.controller import Rollouts
from gateway.rollout.handover import promoted_config
from gateway.rollout.progress import rollout_key
from gateway.state.decisions import Decision, DecisionBook
from gateway.telemetry.audit import AuditEvent
from gateway.telemetry.metrics import Metrics
from tests.support.clock import FakeClock

CANARY = RolloutConfig(
    candidate="next",
    mode="canary",
    steps=(10, 50, 100),
    hold_s=30,
    hold_requests=1000,
    min_comparisons=20,
    agreement_target=0.95,
)


class Fleet:
    """One gateway's rollouts over a decision book; audit events kept."""

    def __init__(
        self,
        clock: FakeClock,
        book: DecisionBook,
        config: RolloutConfig = CANARY,
        synced: bool = True,
        leased: bool = False,
    ) -> None:
        self.book, self.clock = book, clock
        self.events: list[AuditEvent] = []
        self.synced = synced
        self.rollouts = Rollouts(
            {"digits": ModelConfig(pool="now", rollout=config)},
            clock,
            random.Random(1),
            decide=self.decide,
            known=book.get,
            audit=self.events.append,
            burning=lambda model: False,
            synced=lambda: self.synced,
            origin=book.origin,
            leased=leased,
        )

    def decide(self, key: str, action: str, by: str, reason: str, *, floor: int) -> Decision:
        return self.book.decide(key, action, by, reason, self.clock.wall(), floor=floor)

    def state(self) -> dict[str, Any]:
        return dict(self.rollouts.snapshot()["rollouts"]["digits"])


def agree(fleet: Fleet, n: int, agreed: bool = True) -> None:
    for _ in range(n):
        fleet.rollouts.served("digits", True, True, 0.002)
        fleet.rollouts.compared("digits", agreed, [] if agreed else ["label"], 0.002)


@pytest.fixture
def fleet() -> Fleet:
    return Fleet(FakeClock(), DecisionBook("gw-a"))


def test_nothing_is_decided_before_activation_then_the_declared_rollout_starts(
    fleet: Fleet,
) -> None:
    fleet.rollouts.tick()
    assert fleet.state()["phase"] == "unknown"
    assert not fleet.rollouts.plan("digits").candidate
    fleet.rollouts.activate()
    state = fleet.state()
    assert (state["phase"], state["share_percent"]) == ("canary", 10)
    assert fleet.events[-1].who == "rule:config"
    assert fleet.book.get(rollout_key("digits")) is not None


def test_a_store_not_read_yet_holds_the_start() -> None:
    fleet = Fleet(FakeClock(), DecisionBook("gw-a"), synced=False)
    fleet.rollouts.activate()
    assert fleet.state()["phase"] == "unknown"
    fleet.synced = True
    fleet.rollouts.tick()
    assert fleet.state()["phase"] == "canary"


def test_good_evidence_walks_every_step_to_promotion(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    for share in (10, 50, 100):
        assert fleet.state()["share_percent"] == share
        agree(fleet, 25)
        assert fleet.state()["share_percent"] == share  # held: 30 s or 1000 requests
        fleet.clock.advance(30)
        fleet.rollouts.tick()
    state = fleet.state()
    assert state["phase"] == "promoted"
    assert fleet.rollouts.plan("digits").candidate
    assert [e["action"] for e in state["trail"]] == ["start", "step", "step", "promote"]
    assert all(e["evidence"]["compared"] == 25 for e in state["trail"][1:])


def test_disagreement_rolls_back_the_moment_it_is_known(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    agree(fleet, 8)
    agree(fleet, 2, agreed=False)  # 8/10 agree: the interval's top (0.943) is below 0.95
    state = fleet.state()
    assert (state["phase"], state["share_percent"]) == ("rolled_back", 0)
    assert state["trail"][-1]["who"] == "rule:agreement"
    assert state["trail"][-1]["evidence"]["disagreements"] == {"label": 2}
    assert not any(fleet.rollouts.plan("digits").candidate for _ in range(100))
    assert fleet.events[-1].action == "rollout rollback"


def test_operators_pause_resume_promote_and_abort(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    fleet.rollouts.act("digits", "pause", "alice", "look first")
    assert fleet.state()["phase"] == "paused"
    with pytest.raises(Conflict):
        fleet.rollouts.act("digits", "pause", "alice", "")
    fleet.clock.advance(100)
    agree(fleet, 30)
    assert fleet.state()["phase"] == "paused"  # nothing advances while paused
    fleet.rollouts.act("digits", "start", "alice", "")
    fleet.rollouts.act("digits", "promote", "bob", "urgent")
    assert fleet.state()["phase"] == "promoted"
    fleet.rollouts.act("digits", "abort", "alice", "wrong build")
    state = fleet.state()
    assert (state["phase"], state["share_percent"]) == ("aborted", 0)
    whos = [(e["who"], e["action"]) for e in state["trail"]]
    assert whos[1:] == [
        ("alice", "pause"),
        ("alice", "start"),
        ("bob", "promote"),
        ("alice", "abort"),
    ]


def test_another_gateway_follows_the_progress_in_the_shared_book(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    fleet.clock.advance(30)
    agree(fleet, 25)
    assert fleet.state()["share_percent"] == 50
    other = Fleet(fleet.clock, DecisionBook("gw-b"))
    other.book.observe(dict(fleet.book.known))  # the store's pull
    other.rollouts.activate()
    assert (other.state()["phase"], other.state()["share_percent"]) == ("canary", 50)
    assert [e["action"] for e in other.state()["trail"]] == ["start", "step"]
    assert not other.events  # it decided nothing itself


def test_a_restart_resumes_stored_progress_and_a_new_declaration_restarts(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    fleet.clock.advance(30)
    agree(fleet, 25)
    restarted = DecisionBook("gw-a2")
    restarted.adopt(dict(fleet.book.known))
    same = Fleet(fleet.clock, restarted)
    same.rollouts.activate()
    assert same.state()["share_percent"] == 50
    changed = Fleet(fleet.clock, restarted, CANARY.model_copy(update={"steps": (20, 100)}))
    changed.rollouts.activate()
    state = changed.state()
    assert (state["share_percent"], [e["action"] for e in state["trail"]]) == (20, ["start"])


def test_a_reload_carries_progress_and_evidence(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    agree(fleet, 5)
    fresh = Fleet(fleet.clock, fleet.book)
    assert fresh.rollouts.carry_from(fleet.rollouts) == ["digits"]
    assert fresh.state()["evidence"]["step"]["compared"] == 5
    assert fresh.state()["phase"] == "canary"
    assert len(fresh.events) == 0  # nothing restarted


def test_a_promotion_asks_for_its_hand_over_once(fleet: Fleet) -> None:
    asked: list[list[str]] = []
    fleet.rollouts.hand_over = lambda: asked.append(fleet.rollouts.promoted())
    fleet.rollouts.activate()
    fleet.rollouts.act("digits", "promote", "alice", "")
    fleet.rollouts.tick()
    fleet.rollouts.tick()
    assert asked == [["digits"]]


def test_the_promoted_config_serves_the_model_from_its_candidate() -> None:
    config = GatewayConfig.model_validate(
        {
            "pools": {
                name: {"model": "m", "replicas": [{"id": name, "url": "http://h:1"}]}
                for name in ("now", "next")
            },
            "models": {"digits": {"pool": "now", "rollout": {"candidate": "next"}}},
        }
    )
    model = promoted_config(config, ["digits"]).models["digits"]
    assert (model.pool, model.rollout) == ("next", None)


def test_the_rollout_series_follow_the_snapshot(fleet: Fleet) -> None:
    fleet.rollouts.activate()
    agree(fleet, 6)
    agree(fleet, 1, agreed=False)
    metrics = Metrics(process=False)
    metrics.set_rollouts(fleet.rollouts.snapshot())
    text = metrics.render()[0].decode()
    named = 'candidate="next",model="digits"'
    assert f'gateway_rollout_comparisons_total{{{named},result="agree"}} 6.0' in text
    assert f'gateway_rollout_disagreements_total{{{named},output="label"}} 1.0' in text
    assert f"gateway_rollout_share_percent{{{named}}} 10.0" in text
    assert f'gateway_rollout_phase{{{named},phase="canary"}} 1.0' in text

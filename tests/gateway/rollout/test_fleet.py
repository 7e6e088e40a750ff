"""A fleet's rollout on a fake clock: one lease holder decides on pooled evidence; a new
holder's lead fences the old one's decisions; any gateway may roll back."""

from __future__ import annotations

from gateway.rollout.progress import rollout_key
from gateway.state.base import PushBatch
from gateway.state.decisions import DecisionBook
from gateway.state.lease import Lease, token_of
from gateway.state.memory import MemoryStore
from tests.gateway.rollout.test_controller import Fleet, agree
from tests.support.clock import FakeClock


def pair() -> tuple[Fleet, Fleet]:
    clock = FakeClock()
    a = Fleet(clock, DecisionBook("gw-a"), leased=True)
    b = Fleet(clock, DecisionBook("gw-b"), leased=True)
    return a, b


def share(source: Fleet, target: Fleet) -> None:
    """One sync: ``source``'s decisions and counts reach ``target``."""
    target.book.observe(dict(source.book.known))
    target.rollouts.pool.apply_remote(
        {k: d.amount for k, d in source.rollouts.pool.export_deltas().items()}, False
    )
    target.rollouts.tick()


def test_only_the_lease_holder_starts_and_advances() -> None:
    a, b = pair()
    a.rollouts.activate()
    b.rollouts.activate()
    assert a.state()["phase"] == "unknown"  # no lease yet: nobody starts it
    a.rollouts.leased("digits", Lease(True, 1, "gw-a"))
    b.rollouts.leased("digits", Lease(False, 1, "gw-a"))
    a.rollouts.tick()
    b.rollouts.tick()
    assert (a.state()["phase"], b.state()["phase"]) == ("canary", "unknown")
    share(a, b)
    assert b.state()["phase"] == "canary"  # b follows
    a.clock.advance(30)
    agree(b, 25)  # b's requests alone: b never advances
    assert b.state()["share_percent"] == 10 and not b.events
    share(b, a)  # ...but its evidence reaches a, which decides on the pooled counts
    assert a.state()["share_percent"] == 50
    assert a.state()["trail"][-1]["evidence"]["compared"] == 25


def test_a_follower_rolls_back_on_what_it_sees() -> None:
    a, b = pair()
    for fleet, held in ((a, True), (b, False)):
        fleet.rollouts.activate()
        fleet.rollouts.leased("digits", Lease(held, 1, "gw-a"))
    a.rollouts.tick()
    share(a, b)
    agree(b, 8)
    agree(b, 2, agreed=False)
    assert b.state()["phase"] == "rolled_back"
    assert token_of(b.book.known[rollout_key("digits")].version) == 1  # under the fence seen


async def test_a_new_holders_lead_fences_the_old_ones_decisions() -> None:
    a, b = pair()
    store = MemoryStore(a.clock)
    for fleet in (a, b):
        fleet.rollouts.activate()
    a.rollouts.leased("digits", await store.lease(rollout_key("digits"), "gw-a", 5))
    a.rollouts.tick()
    share(a, b)
    a.clock.advance(6)  # gw-a stalls past its lease; gw-b takes it
    b.rollouts.leased("digits", await store.lease(rollout_key("digits"), "gw-b", 5))
    assert b.state()["trail"][-1]["action"] == "lead"
    a.rollouts.act("digits", "promote", "rule:stale", "")  # gw-a wakes, still at token 1
    await store.push(PushBatch("gw-a", 1, decisions=tuple(a.book.take_unsent())))
    await store.push(PushBatch("gw-b", 1, decisions=tuple(b.book.take_unsent())))
    stored = (await store.pull()).decisions[rollout_key("digits")]
    assert (stored.action, stored.origin) == ("canary", "gw-b")  # the stale promotion refused
    a.book.observe({stored.key: stored})
    a.rollouts.tick()
    assert a.state()["phase"] == "canary"  # and gw-a follows the new holder again

"""Leases with fencing in the store contract: memory, one Redis and a Cluster alike."""

from __future__ import annotations

from gateway.state.base import PushBatch, StateStore
from gateway.state.decisions import Decision
from gateway.state.lease import Lease, fenced_version
from tests.support.clock import FakeClock

NAME = "rollout:digits"


def _step(version: int, origin: str, action: str = "canary") -> Decision:
    return Decision(NAME, action, 0.0, "rule:evidence", "{}", 1.0, version, origin)


async def test_one_holder_at_a_time_and_each_new_holder_a_higher_token(
    store: StateStore,
) -> None:
    assert await store.lease(NAME, "gw-a", 30) == Lease(True, 1, "gw-a")
    assert await store.lease(NAME, "gw-b", 30) == Lease(False, 1, "gw-a")
    assert await store.lease(NAME, "gw-a", 30) == Lease(True, 1, "gw-a")  # renewed, same token
    await store.lease(NAME, "gw-a", 30, release=True)
    assert await store.lease(NAME, "gw-b", 30) == Lease(True, 2, "gw-b")
    assert (await store.lease("rollout:other", "gw-a", 30)).token == 1  # per name


async def test_a_lapsed_lease_goes_to_the_next_asker(store: StateStore, clock: FakeClock) -> None:
    if store.name != "memory":
        return  # Redis lapses it by its own clock; the release above covers the takeover
    await store.lease(NAME, "gw-a", 5)
    clock.advance(6)
    assert await store.lease(NAME, "gw-b", 5) == Lease(True, 2, "gw-b")


async def test_a_stale_holders_decision_is_refused_by_the_store(store: StateStore) -> None:
    first = (await store.lease(NAME, "gw-a", 30)).token
    await store.push(PushBatch("gw-a", 1, decisions=(_step(fenced_version(first) + 1, "gw-a"),)))
    await store.lease(NAME, "gw-a", 30, release=True)  # gw-a paused past its lease, say
    second = (await store.lease(NAME, "gw-b", 30)).token
    assert second > first
    stale = _step(fenced_version(first) + 2, "gw-a", "promoted")  # gw-a wakes up and decides
    await store.push(PushBatch("gw-a", 2, decisions=(stale,)))
    assert (await store.pull()).decisions[NAME].version == fenced_version(first) + 1
    fresh = _step(fenced_version(second), "gw-b", "rolled_back")
    await store.push(PushBatch("gw-b", 1, decisions=(fresh,)))
    assert (await store.pull()).decisions[NAME] == fresh
    operator = Decision("pool:p", "pause", 0.0, "alice", "", 1.0, 1, "gw-a")  # not fenced
    await store.push(PushBatch("gw-a", 3, decisions=(operator,)))
    assert (await store.pull()).decisions["pool:p"] == operator

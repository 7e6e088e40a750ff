"""Operators' decisions in the store contract: memory, one Redis and a Cluster alike."""

from __future__ import annotations

import time

from gateway.state.base import SIGNAL_TTL_S, PushBatch, StateStore
from gateway.state.decisions import Decision, DecisionBook
from tests.support.clock import FakeClock


def _drain(version: int, origin: str = "a", at: float = 1.0, action: str = "drain") -> Decision:
    return Decision("replica:r1", action, 0.0, "alice", "disk", at, version, origin)


async def test_a_decision_is_kept_and_returned_by_every_pull(store: StateStore) -> None:
    decision = _drain(1)
    await store.push(PushBatch("a", 1, decisions=(decision,)))
    assert (await store.pull()).decisions == {"replica:r1": decision}
    again = await store.pull((await store.pull()).cursor)  # not only in a full pull
    assert again.decisions == {"replica:r1": decision}


async def test_a_higher_version_wins_and_a_late_older_one_is_ignored(store: StateStore) -> None:
    restore = _drain(2, origin="b", action="restore")
    await store.push(PushBatch("b", 1, decisions=(restore,)))
    await store.push(PushBatch("a", 1, decisions=(_drain(1, at=99.0),)))  # older, later clock
    assert (await store.pull()).decisions["replica:r1"] == restore
    tie = _drain(2, origin="c", at=restore.at)  # same version and time: the origin decides
    await store.push(PushBatch("c", 1, decisions=(tie,)))
    assert (await store.pull()).decisions["replica:r1"] == tie


async def test_decisions_outlive_the_signal_ttl(store: StateStore, clock: FakeClock) -> None:
    """A drain taken long ago (its time older than any signal may be) still holds."""
    old = Decision("pool:p", "pause", 0.0, "bob", "", time.time() - 10 * SIGNAL_TTL_S, 1, "a")
    await store.push(PushBatch("a", 1, decisions=(old,)))
    clock.advance(2 * SIGNAL_TTL_S)
    assert (await store.pull()).decisions == {"pool:p": old}


async def test_a_book_offers_again_what_the_store_lacks(store: StateStore) -> None:
    book = DecisionBook("gw-a")
    book.decide("replica:r1", "drain", "alice", "", at=time.time())
    await store.push(PushBatch("a", 1, decisions=tuple(book.take_unsent())))
    fresh = (await store.pull()).decisions
    assert book.observe(fresh) == [] and book.take_unsent() == []  # nothing new, nothing owed
    assert book.observe({}) == []  # a store that lost its data...
    assert [d.key for d in book.take_unsent()] == ["replica:r1"]  # ...gets it back

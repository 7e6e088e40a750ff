"""Decisions through `StateSync`: shared within one tick, kept through an outage, given back
to a store that lost its data. Against memory, one Redis and a Cluster (``store``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.state.base import (
    START,
    CounterDelta,
    Cursor,
    Pulled,
    PushBatch,
    PushResult,
    ReplicaSignal,
    SharedView,
    StateStore,
    StoreUnavailable,
)
from gateway.state.decisions import Decision, DecisionBook
from gateway.state.memory import MemoryStore
from gateway.state.sync import StateSync
from tests.support.clock import FakeClock


class Node:
    """One gateway's side: a book, and a sync that carries it."""

    def __init__(self, store: StateStore, clock: FakeClock, name: str) -> None:
        self.book = DecisionBook(name)
        self.obeyed: list[Decision] = []
        self.clock = clock
        self.sync = StateSync(
            store, self._collect, self._apply, clock, origin=name, decisions=self.book.take_unsent
        )

    def _collect(self) -> tuple[Sequence[ReplicaSignal], Mapping[str, CounterDelta]]:
        return [], {}

    def _apply(self, view: SharedView) -> None:
        self.obeyed += self.book.observe(view.decisions)

    def drain(self, rid: str) -> Decision:
        return self.book.decide(f"replica:{rid}", "drain", "alice", "", self.clock.wall())


async def test_a_decision_is_obeyed_by_the_other_gateway_on_its_next_tick(
    store: StateStore, clock: FakeClock
) -> None:
    a, b = Node(store, clock, "a"), Node(store, clock, "b")
    decision = a.drain("r1")
    assert await a.sync.tick() and await b.sync.tick()
    assert b.obeyed == [decision]
    restore = b.book.decide("replica:r1", "restore", "bob", "", clock.wall())
    assert restore.version == 2  # one above what B knows
    assert await b.sync.tick() and await a.sync.tick()
    assert a.obeyed == [restore]
    assert await a.sync.tick() and await b.sync.tick()
    assert b.obeyed == [decision]  # its own restore is not obeyed back


class _Switch(MemoryStore):
    """A memory store that can be made unavailable."""

    down = False

    async def push(self, batch: PushBatch) -> PushResult:
        if self.down:
            raise StoreUnavailable("down")
        return await super().push(batch)

    async def pull(self, since: Cursor = START) -> Pulled:
        if self.down:
            raise StoreUnavailable("down")
        return await super().pull(since)


async def test_a_decision_taken_in_an_outage_is_shared_when_the_store_is_back(
    clock: FakeClock,
) -> None:
    store = _Switch(clock)
    a, b = Node(store, clock, "a"), Node(store, clock, "b")
    store.down = True
    decision = a.drain("r1")
    assert not await a.sync.tick()
    store.down = False
    assert await a.sync.tick() and await b.sync.tick()
    assert b.obeyed == [decision]


async def test_a_store_that_lost_its_decisions_gets_them_back(clock: FakeClock) -> None:
    first = MemoryStore(clock)
    a = Node(first, clock, "a")
    decision = a.drain("r1")
    assert await a.sync.tick()
    fresh = MemoryStore(clock)  # Redis restarted without persistence
    a.sync.store = fresh
    assert await a.sync.tick()  # the pull finds nothing: the book offers it again...
    assert await a.sync.tick()  # ...and the next push carries it
    assert (await fresh.pull()).decisions == {"replica:r1": decision}

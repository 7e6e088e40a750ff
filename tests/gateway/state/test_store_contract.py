"""The storage contract: every test runs against `MemoryStore` and `RedisStore` alike."""

from __future__ import annotations

import time

from gateway.state.base import (
    START,
    CounterDelta,
    Cursor,
    PushBatch,
    ReplicaSignal,
    StateStore,
)
from tests.support.clock import FakeClock

# Signals expire an hour after their stamp (Redis's clock), so test signals are stamped now; the
# fractions check that a stamp travels exactly.
_NOW = float(int(time.time())) + 0.25


def _later(clock: FakeClock, seconds: float = 3600.0) -> float:
    return clock.wall() + seconds


def _signal(
    epoch: int, breaker: str = "open", origin: str = "a", stamp: float = 1.0
) -> ReplicaSignal:
    return ReplicaSignal("r1", breaker, 0.0, epoch, origin, _NOW + stamp)


async def test_counters_add_up_across_pushes_and_origins(
    store: StateStore, clock: FakeClock
) -> None:
    exp = _later(clock)
    await store.push(PushBatch("a", 1, counters={"k1": CounterDelta(3, exp)}))
    await store.push(
        PushBatch("a", 2, counters={"k1": CounterDelta(2, exp), "k2": CounterDelta(1, exp)})
    )
    await store.push(PushBatch("b", 1, counters={"k1": CounterDelta(10, exp)}))
    snapshot = await store.pull()
    assert snapshot.full
    assert snapshot.counters == {"k1": 15, "k2": 1}
    assert store.healthy


async def test_a_batch_is_applied_at_most_once(store: StateStore, clock: FakeClock) -> None:
    batch = PushBatch("a", 7, counters={"k": CounterDelta(5, _later(clock))})
    first = await store.push(batch)
    again = await store.push(batch)  # a retry after a lost reply
    older = await store.push(PushBatch("a", 6, counters={"k": CounterDelta(1, _later(clock))}))
    assert first.applied and not again.applied and not older.applied
    assert first.generation == again.generation
    assert (await store.pull()).counters == {"k": 5}


async def test_pull_returns_only_keys_changed_after_the_cursor(
    store: StateStore, clock: FakeClock
) -> None:
    exp = _later(clock)
    await store.push(
        PushBatch("a", 1, counters={"k1": CounterDelta(1, exp), "k2": CounterDelta(1, exp)})
    )
    first = await store.pull(START)
    assert first.full and set(first.counters) == {"k1", "k2"}
    nothing = await store.pull(first.cursor)
    assert not nothing.full and nothing.counters == {}
    await store.push(PushBatch("b", 1, counters={"k2": CounterDelta(4, exp)}))
    changed = await store.pull(nothing.cursor)
    assert not changed.full and changed.counters == {"k2": 5}  # the total, not the delta
    assert changed.cursor.seq > first.cursor.seq


async def test_a_cursor_of_another_generation_gets_everything(
    store: StateStore, clock: FakeClock
) -> None:
    await store.push(PushBatch("a", 1, counters={"k": CounterDelta(1, _later(clock))}))
    current = await store.pull()
    stale = await store.pull(Cursor("some-other-generation", current.cursor.seq))
    assert stale.full and stale.counters == {"k": 1}
    ahead = await store.pull(Cursor(current.generation, current.cursor.seq + 100))
    assert ahead.full  # a cursor from the future: the store was reset and refilled


async def test_expired_counters_are_gone(store: StateStore, clock: FakeClock) -> None:
    await store.push(
        PushBatch(
            "a",
            1,
            counters={
                "old": CounterDelta(1, clock.wall() - 1),
                "new": CounterDelta(1, _later(clock)),
            },
        )
    )
    assert (await store.pull()).counters == {"new": 1}


async def test_higher_epoch_wins_and_a_stale_one_is_refused(store: StateStore) -> None:
    await store.push(PushBatch("a", 1, signals=(_signal(2, "open", origin="a"),)))
    result = await store.push(
        PushBatch("b", 1, signals=(_signal(1, "closed", origin="b", stamp=9),))
    )
    assert result.stale == ("r1",)
    assert (await store.pull()).signals["r1"] == _signal(2, "open", origin="a")
    newer = await store.push(PushBatch("b", 2, signals=(_signal(3, "half-open", origin="b"),)))
    assert newer.stale == ()
    assert (await store.pull()).signals["r1"].breaker == "half-open"


async def test_equal_epochs_order_by_stamp_then_origin(store: StateStore) -> None:
    await store.push(PushBatch("a", 1, signals=(_signal(5, "open", origin="a", stamp=2),)))
    await store.push(PushBatch("b", 1, signals=(_signal(5, "closed", origin="b", stamp=1),)))
    assert (await store.pull()).signals["r1"].origin == "a"  # older stamp loses
    await store.push(PushBatch("b", 2, signals=(_signal(5, "closed", origin="b", stamp=2),)))
    assert (await store.pull()).signals["r1"].origin == "b"  # same stamp: greater origin wins
    same = await store.push(PushBatch("b", 3, signals=(_signal(5, "closed", origin="b", stamp=2),)))
    assert same.stale == ()  # resending the same signal is a no-op, not stale


async def test_signals_of_every_replica_come_back_on_every_pull(store: StateStore) -> None:
    signals = tuple(ReplicaSignal(f"r{i}", "open", _NOW + 100.25, 1, "a", _NOW) for i in range(5))
    await store.push(PushBatch("a", 1, signals=signals))
    first = await store.pull()
    second = await store.pull(first.cursor)
    assert second.signals == first.signals == {s.replica_id: s for s in signals}
    assert store.describe()["kind"] == store.name

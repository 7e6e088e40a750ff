from __future__ import annotations

import asyncio
import logging
import time

import pytest

from gateway.clock import MonotonicClock
from gateway.state.base import (
    SIGNAL_TTL_S,
    START,
    CounterDelta,
    Cursor,
    PushBatch,
    PushResult,
    ReplicaSignal,
    SharedSnapshot,
    SharedView,
    StateStore,
    StoreUnavailable,
)
from gateway.state.lease import Lease
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.sync import PRUNE_EVERY_S, StateSync
from tests.gateway.state.instance import Instance
from tests.support.clock import FakeClock
from tests.support.redis_server import TEST_TIMEOUT_S, RedisServer, new_namespace


async def test_two_instances_converge_within_one_interval(
    store: StateStore, clock: FakeClock
) -> None:
    a, b = Instance(store, clock, "a"), Instance(store, clock, "b")
    a.record(ok=8, failed=2)
    b.record(ok=5)
    a.ledger.local("r1", "open")
    assert await a.sync.tick() and await b.sync.tick()
    assert b.seen() == (15, 2)  # B pulled after A pushed: one tick each
    assert [s.breaker for s in b.applied] == ["open"]
    assert await a.sync.tick()
    assert a.seen() == (15, 2)
    assert a.applied == []  # its own signal is not applied back
    a.record(ok=1)
    assert await a.sync.tick() and await b.sync.tick()
    assert a.seen() == b.seen() == (16, 2)


async def test_redis_killed_then_restarted_serves_locally_and_reconciles(
    redis_server: RedisServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    ns = new_namespace()
    a = Instance(
        RedisStore(redis_server.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S), clock, "a"
    )
    b = Instance(
        RedisStore(redis_server.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S), clock, "b"
    )
    a.record(ok=10)
    b.record(ok=4, failed=1)
    for sync in (a.sync, b.sync, a.sync):
        assert await sync.tick()
    assert a.seen() == b.seen() == (15, 1)

    await asyncio.to_thread(redis_server.kill)
    a.record(ok=6, failed=1)
    with caplog.at_level(logging.WARNING, logger="gateway.state.sync"):
        assert not await a.sync.tick()  # no exception: degraded
    state = a.sync.snapshot()
    assert state["degraded"] and state["since"] == clock.wall() and state["last_error"]
    assert state["pending_keys"] > 0
    assert not a.sync.store.healthy
    assert a.seen() == (22, 2)  # local events count at once; the others' as last seen
    assert "unavailable" in caplog.text

    await asyncio.to_thread(redis_server.start)  # same port, empty: all data was lost
    clock.advance(1)
    assert await a.sync.tick()
    assert not a.sync.degraded and a.sync.store.healthy
    assert a.sync.resyncs == 1
    assert a.seen() == (17, 1)  # B has not pushed its part again yet
    assert await b.sync.tick()  # B sees the new generation and pushes all of its own again
    assert b.sync.resyncs == 1
    assert b.seen() == (22, 2)
    assert await a.sync.tick()
    assert a.seen() == b.seen() == (22, 2)
    reader = RedisStore(redis_server.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S)
    fresh = await reader.pull()
    await reader.close()
    totals = {k: v for k, v in fresh.counters.items() if ":f:" in k and k.endswith(":t")}
    assert sum(totals.values()) == 22
    for instance in (a, b):
        await instance.sync.stop()


async def test_a_hung_redis_costs_one_bounded_timeout(
    redis_server: RedisServer, clock: FakeClock
) -> None:
    a = Instance(
        RedisStore(redis_server.url, namespace=new_namespace(), op_timeout_s=0.5), clock, "a"
    )
    a.record(ok=1)
    assert await a.sync.tick()
    await asyncio.to_thread(redis_server.pause)
    try:
        a.record(ok=1)
        started = time.monotonic()
        assert not await a.sync.tick()
        assert time.monotonic() - started < 3.0  # 0.5 s per call, with room for a busy machine
        assert a.sync.degraded and "Timeout" in (a.sync.last_error or "")
    finally:
        await asyncio.to_thread(redis_server.resume)
    assert await a.sync.tick()
    assert not a.sync.degraded and a.seen() == (2, 0)
    await a.sync.stop()


async def test_a_stale_instance_cannot_overwrite_a_newer_state(
    store: StateStore, clock: FakeClock
) -> None:
    a, b = Instance(store, clock, "a"), Instance(store, clock, "b")
    a.ledger.local("r1", "open")
    clock.advance(1)
    a.ledger.local("r1", "half-open")  # epoch 2
    assert await a.sync.tick()
    clock.advance(1)
    b.ledger.local("r1", "closed")  # B knew nothing: epoch 1, however recent
    assert await b.sync.tick()
    assert b.sync.stale_signals == 1
    assert (await store.pull()).signals["r1"].breaker == "half-open"
    assert [(s.breaker, s.epoch) for s in b.applied] == [("half-open", 2)]
    b.ledger.local("r1", "open")  # now B decides with what it knows: epoch 3 wins
    assert await b.sync.tick() and await a.sync.tick()
    assert [(s.breaker, s.epoch, s.origin) for s in a.applied] == [("open", 3, "b")]


class _Down:
    """A store that is always unavailable."""

    name = "down"
    healthy = False

    async def push(self, batch: PushBatch) -> PushResult:
        raise StoreUnavailable("down")

    async def pull(self, since: Cursor = START) -> SharedSnapshot:
        raise StoreUnavailable("down")

    async def lease(self, name: str, holder: str, ttl_s: float, release: bool = False) -> Lease:
        raise StoreUnavailable("down")

    def describe(self) -> dict[str, object]:
        return {"kind": self.name}

    async def close(self) -> None:
        return None


async def test_unsent_counters_stay_bounded_during_a_long_outage(clock: FakeClock) -> None:
    ticks = iter(range(10))

    def collect() -> tuple[list[ReplicaSignal], dict[str, CounterDelta]]:
        tick = next(ticks)
        return [], {f"k{tick}-{i}": CounterDelta(1, clock.wall() + 3600) for i in range(20)}

    sync = StateSync(_Down(), collect, lambda view: None, clock, max_pending_keys=50)
    for _ in range(10):
        assert not await sync.tick()
    state = sync.snapshot()
    assert state["pending_keys"] <= 50
    assert state["dropped_keys"] == 200 - 50
    assert state["failures"] == 10 and state["degraded"]


class _LostReply(MemoryStore):
    """Applies the first push and then loses its reply, like a timeout after the write."""

    lost = 0

    async def push(self, batch: PushBatch) -> PushResult:
        result = await super().push(batch)
        if not self.lost:
            self.lost += 1
            raise StoreUnavailable("reply lost")
        return result


async def test_a_batch_whose_reply_was_lost_is_not_counted_twice(clock: FakeClock) -> None:
    store = _LostReply(clock)
    a, b = Instance(store, clock, "a"), Instance(store, clock, "b")
    a.record(ok=3)
    assert not await a.sync.tick()
    a.record(ok=1)
    assert await a.sync.tick()  # resends batch 1 (skipped by the store), then batch 2
    assert await b.sync.tick()
    assert b.seen() == (4, 0)


async def test_collect_and_apply_failures_are_logged_never_raised(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    def collect() -> tuple[list[ReplicaSignal], dict[str, CounterDelta]]:
        raise RuntimeError("collect broke")

    def apply(view: SharedView) -> None:
        raise RuntimeError("apply broke")

    sync = StateSync(MemoryStore(clock), collect, apply, clock)
    with caplog.at_level(logging.ERROR, logger="gateway.state.sync"):
        assert await sync.tick()
    assert "collect failed" in caplog.text and "apply failed" in caplog.text
    views: list[SharedView] = []
    sync._apply = views.append
    assert await sync.tick()
    assert views[0].full  # what the failed apply missed comes again


async def test_start_runs_the_loop_and_stop_flushes_and_ends_it() -> None:
    clock = MonotonicClock()
    store = MemoryStore(clock)
    a = Instance(store, clock, "a")
    three_ticks = asyncio.Event()
    apply = a.sync._apply

    def counting_apply(view: SharedView) -> None:
        apply(view)
        if a.sync.ticks >= 3:
            three_ticks.set()

    a.sync._apply = counting_apply
    a.sync.interval_s = 0.01
    a.sync.start()
    try:
        await asyncio.wait_for(three_ticks.wait(), timeout=5.0)
        a.record(ok=2)
    finally:
        await a.sync.stop()
    counters = (await store.pull()).counters
    total = sum(v for k, v in counters.items() if ":f:" in k and k.endswith(":t"))
    assert total == 2  # the final flush pushed what was recorded just before stop


async def test_round_trip_with_30_signals_and_100_counters(
    shared_redis: RedisServer, clock: FakeClock
) -> None:
    """push + pull of a typical tick; the figure is printed (run with -s) and loosely bounded."""
    batch: tuple[list[ReplicaSignal], dict[str, CounterDelta]] = ([], {})
    store = RedisStore(shared_redis.url, namespace=new_namespace(), op_timeout_s=TEST_TIMEOUT_S)
    sync = StateSync(store, lambda: batch, lambda view: None, clock, origin="m")
    samples = []
    for n in range(1, 51):
        batch = (
            [ReplicaSignal(f"r{i}", "closed", 0.0, n, "m", clock.wall()) for i in range(30)],
            {f"slo:m:s:f:{i}:t": CounterDelta(1, clock.wall() + 3600) for i in range(100)},
        )
        assert await sync.tick()
        samples.append(sync.last_round_trip_ms or 0.0)
    samples.sort()
    median, p90 = samples[25], samples[45]
    print(f"\npush+pull, 30 signals + 100 counters: median {median:.2f} ms, p90 {p90:.2f} ms")
    assert median < 100.0
    await sync.stop()


async def test_a_restarted_instance_picks_up_the_shared_history_under_its_own_name(
    store: StateStore, clock: FakeClock
) -> None:
    """SLO windows survive a restart when the store holds them; a fixed instance name restarts
    cleanly: its new batches are not taken for replays, its old signals are adopted."""
    first = Instance(store, clock, "gw-a")
    first.record(ok=10, failed=1)
    first.ledger.local("r1", "open")
    assert await first.sync.tick()
    again = Instance(store, clock, "gw-a")  # the same name, a new process: nothing local
    assert await again.sync.tick()
    assert again.seen() == (11, 1)
    assert [(s.breaker, s.epoch) for s in again.applied] == [("open", 1)]
    again.record(ok=1)
    assert again.ledger.local("r1", "closed").epoch == 2
    assert await again.sync.tick()
    assert again.sync.stale_signals == 0
    snapshot = await store.pull()
    assert snapshot.signals["r1"].breaker == "closed"
    total = sum(v for k, v in snapshot.counters.items() if ":f:" in k and k.endswith(":t"))
    assert total == 12  # the new run's batch 1 was applied


async def test_after_a_store_reset_only_live_signals_are_pushed_again() -> None:
    """An instance re-pushes its own signals when the store lost its data; not expired ones."""
    clock = FakeClock()
    store = MemoryStore(clock)
    a = Instance(store, clock, "a")
    a.ledger.local("r-old", "open")
    assert await a.sync.tick()
    clock.advance(SIGNAL_TTL_S - 10)
    a.ledger.local("r-new", "open")
    assert await a.sync.tick()
    clock.advance(PRUNE_EVERY_S)  # r-old has expired; the sync forgets it at this tick
    assert await a.sync.tick()
    store.generation = "lost-everything"  # as a Redis restart without persistence
    pushed: list[PushBatch] = []
    real_push = store.push

    async def recording_push(batch: PushBatch) -> PushResult:
        pushed.append(batch)
        return await real_push(batch)

    store.push = recording_push  # type: ignore[method-assign]
    assert await a.sync.tick()
    assert [s.replica_id for b in pushed for s in b.signals] == ["r-new"]

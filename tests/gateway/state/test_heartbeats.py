"""Heartbeats in the stores and through `StateSync`: every instance of a namespace is returned
by every pull, the newest per instance wins, an expired one is dropped, and a sync publishes
its own every ``heartbeat_every_s``. Against memory, one Redis and a Cluster (``store``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.state.base import CounterDelta, PushBatch, ReplicaSignal, SharedView, StateStore
from gateway.state.fleet import HEARTBEAT_TTL_S, HELD_AHEAD_S, Heartbeat
from gateway.state.memory import MemoryStore
from gateway.state.sync import StateSync
from tests.support.clock import FakeClock


def _beat(instance: str, seen: float, rate: float = 1.5, **verdicts: str) -> Heartbeat:
    return Heartbeat(instance, "0.1.0", seen - 30.0, seen, rate, 0.25, verdicts)


async def test_every_instance_heartbeat_comes_back_with_every_pull(
    store: StateStore, clock: FakeClock
) -> None:
    now = clock.wall()
    a = _beat("gw-a", now + 0.125, r1="serving", r2="unhealthy")
    await store.push(PushBatch("a#1", 1, heartbeat=a))
    await store.push(PushBatch("b#1", 1, heartbeat=_beat("gw-b", now, r1="ejected")))
    beats = (await store.pull()).heartbeats
    assert beats == {"gw-a": a, "gw-b": _beat("gw-b", now, r1="ejected")}  # exactly, fractions
    assert beats["gw-a"].verdicts == {"r1": "serving", "r2": "unhealthy"}


async def test_the_newest_heartbeat_of_an_instance_wins(
    store: StateStore, clock: FakeClock
) -> None:
    now = clock.wall()
    await store.push(PushBatch("a#1", 1, heartbeat=_beat("gw-a", now, rate=2.0)))
    await store.push(PushBatch("a#1", 2, heartbeat=_beat("gw-a", now - 5, rate=9.0)))  # late
    assert (await store.pull()).heartbeats["gw-a"].rate == 2.0
    await store.push(PushBatch("a#2", 1, heartbeat=_beat("gw-a", now + 1, rate=3.0)))  # restarted
    assert (await store.pull()).heartbeats["gw-a"].rate == 3.0


async def test_an_expired_heartbeat_is_dropped(store: StateStore, clock: FakeClock) -> None:
    gone = _beat("gw-old", clock.wall() - HEARTBEAT_TTL_S - 1)
    result = await store.push(PushBatch("o#1", 1, heartbeat=gone))
    assert result.applied
    assert (await store.pull()).heartbeats == {}


async def test_a_heartbeat_leaves_the_memory_store_when_it_expires(clock: FakeClock) -> None:
    store = MemoryStore(clock)
    await store.push(PushBatch("a#1", 1, heartbeat=_beat("gw-a", clock.wall())))
    clock.advance(HEARTBEAT_TTL_S - 1)
    assert set((await store.pull()).heartbeats) == {"gw-a"}
    clock.advance(2)
    assert (await store.pull()).heartbeats == {}
    assert store.describe()["heartbeats"] == 0


class Beating:
    """One gateway's sync with a heartbeat; ``seen`` is the fleet as its last pull showed."""

    def __init__(self, store: StateStore, clock: FakeClock, name: str) -> None:
        self.clock, self.name, self.built = clock, name, 0
        self.seen: dict[str, Heartbeat] = {}
        self.sync = StateSync(
            store,
            self._collect,
            self._apply,
            clock,
            origin=name,
            heartbeat=self._beat,
            heartbeat_every_s=2.0,
        )

    def _collect(self) -> tuple[Sequence[ReplicaSignal], Mapping[str, CounterDelta]]:
        return [], {}

    def _apply(self, view: SharedView) -> None:
        self.seen = view.heartbeats

    def _beat(self) -> Heartbeat:
        self.built += 1
        return _beat(self.name, self.clock.wall(), rate=float(self.built), r1="serving")


async def test_two_syncs_see_each_other_and_beat_every_interval(
    store: StateStore, clock: FakeClock
) -> None:
    a, b = Beating(store, clock, "gw-a"), Beating(store, clock, "gw-b")
    assert await a.sync.tick() and await b.sync.tick() and await a.sync.tick()
    assert set(a.seen) == set(b.seen) == {"gw-a", "gw-b"}
    assert a.built == 1  # the second tick came before the interval: nothing new to say
    clock.advance(2.0)
    assert await a.sync.tick() and await b.sync.tick()
    assert a.built == 2 and b.seen["gw-a"].rate == 2.0


async def test_a_heartbeat_stamped_far_ahead_keeps_no_place_against_its_instance(
    store: StateStore, clock: FakeClock
) -> None:
    """A forged stamp a year ahead once outranked every heartbeat its instance published (and
    readers drop it as from the future): the instance's next heartbeat takes its place. One
    ahead by less than `HELD_AHEAD_S` (clock skew) still orders by its stamp."""
    now = clock.wall()
    await store.push(PushBatch("x#1", 1, heartbeat=_beat("gw-a", now + 365 * 86_400, rate=9.0)))
    await store.push(PushBatch("a#1", 1, heartbeat=_beat("gw-a", now, rate=1.0)))
    assert (await store.pull()).heartbeats["gw-a"].rate == 1.0
    await store.push(PushBatch("x#1", 2, heartbeat=_beat("gw-a", now + HELD_AHEAD_S / 2, rate=9.0)))
    await store.push(PushBatch("a#1", 2, heartbeat=_beat("gw-a", now + 1, rate=2.0)))
    assert (await store.pull()).heartbeats["gw-a"].rate == 9.0

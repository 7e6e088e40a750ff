"""The publisher sends a snapshot when it changed and once a second besides; only a change
moves its version."""

from __future__ import annotations

import asyncio
import itertools

import msgspec

from gateway.snapshot.messages import Loads, LoadView, PoolView, ReplicaView, Snapshot
from gateway.snapshot.publisher import SnapshotPublisher
from tests.support.clock import FakeClock
from tests.support.virtual_time import VirtualClock, VirtualTimeLoop


def snapshot(draining: bool = False, version: int = 0, sent_at: float = 0.0) -> Snapshot:
    return Snapshot(version, sent_at, draining, (), {}, ())


class Rig:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.state = snapshot()
        self.sent: list[Snapshot | Loads] = []
        self.publisher = SnapshotPublisher(lambda: self.state, self.sent.append, clock)


def test_the_first_snapshot_goes_at_once_as_version_one() -> None:
    rig = Rig(FakeClock(start=10.0))
    rig.publisher.tick()
    assert rig.sent == [snapshot(version=1, sent_at=10.0)]
    assert rig.publisher.latest == rig.sent[-1]


def test_an_unchanged_snapshot_goes_again_only_as_a_heartbeat() -> None:
    clock = FakeClock(start=0.0)
    rig = Rig(clock)
    for _ in range(60):  # a tick every 50 ms for three seconds
        rig.publisher.tick()
        clock.advance(0.05)
    assert [s.version for s in rig.sent] == [1, 1, 1, 1]
    gaps = [b.sent_at - a.sent_at for a, b in itertools.pairwise(rig.sent)]
    assert all(0.9 < gap <= 1.0 + 1e-6 for gap in gaps)


def test_a_change_goes_at_the_next_tick_with_the_next_version() -> None:
    clock = FakeClock(start=0.0)
    rig = Rig(clock)
    rig.publisher.tick()
    clock.advance(0.05)
    rig.state = snapshot(draining=True)
    rig.publisher.tick()
    assert rig.sent[-1] == snapshot(draining=True, version=2, sent_at=0.05)


def test_what_build_puts_in_version_and_sent_at_is_no_change() -> None:
    clock = FakeClock(start=0.0)
    rig = Rig(clock)
    rig.publisher.tick()
    rig.state = snapshot(version=77, sent_at=12.5)
    clock.advance(0.05)
    rig.publisher.tick()
    assert len(rig.sent) == 1


def test_over_ten_seconds_only_changes_and_heartbeats_go_and_versions_rise() -> None:
    clock = FakeClock(start=0.0)
    rig = Rig(clock)
    changes_at = {40, 41, 100, 170}  # ticks (of 50 ms) at which the state flips
    for tick in range(200):
        if tick in changes_at:
            rig.state = snapshot(draining=not rig.state.draining)
        rig.publisher.tick()
        clock.advance(0.05)
    versions = [s.version for s in rig.sent]
    assert versions == sorted(versions) and versions[-1] == 1 + len(changes_at)
    gaps = [b.sent_at - a.sent_at for a, b in itertools.pairwise(rig.sent)]
    assert max(gaps) <= 1.0 + 1e-6  # never a second without one
    heartbeats = sum(1 for a, b in itertools.pairwise(rig.sent) if a.version == b.version)
    assert len(rig.sent) == 1 + len(changes_at) + heartbeats
    assert heartbeats <= 10  # ten seconds: at most one a second
    encoded = [msgspec.msgpack.encode(s) for s in rig.sent]
    assert len(set(encoded)) == len(encoded)


def test_its_service_ticks_every_interval() -> None:
    clock = VirtualClock(start=0.0)
    rig = Rig(clock)

    async def main() -> None:
        service = rig.publisher.service()
        service.start()
        await clock.sleep(0.26)
        rig.state = snapshot(draining=True)
        await clock.sleep(0.05)
        await service.stop()

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        runner.run(main())
    assert [(s.version, round(s.sent_at, 3)) for s in rig.sent] == [(1, 0.05), (2, 0.3)]


def loaded(queue: float, healthy: bool = True) -> Snapshot:
    """A one-pool snapshot whose one replica reported ``queue``."""
    load = LoadView(queue, None, queue, "answer")
    replica = ReplicaView("r0", "http://r0", None, False, healthy, 0.0, None, 0.0, None, 1.0, load)
    pool = PoolView("p", None, (), None, (replica,))
    return Snapshot(0, 0.0, False, (pool,), {}, ())


def test_a_change_of_loads_alone_waits_for_the_loads_interval_and_goes_alone() -> None:
    clock = FakeClock(start=0.0)
    rig = Rig(clock)
    rig.state = loaded(1.0)
    rig.publisher.tick()
    # a new reading every tick, for 0.2 s: none sent, the last goes at 0.25 s
    for queue in (2.0, 3.0, 4.0, 5.0):
        clock.advance(0.05)
        rig.state = loaded(queue)
        rig.publisher.tick()
    assert len(rig.sent) == 1
    clock.advance(0.05)
    rig.state = loaded(6.0)
    rig.publisher.tick()
    assert [s.version for s in rig.sent] == [1, 2]
    # the readings alone, not the whole snapshot; a worker that says hello gets it whole
    assert rig.sent[-1] == Loads(2, 0.25, {"r0": LoadView(6.0, None, 6.0, "answer")})
    latest = rig.publisher.latest
    assert latest is not None and latest.version == 2
    assert latest.pools[0].members[0].load == LoadView(6.0, None, 6.0, "answer")
    # anything else goes at the next tick, whole, the loads with it
    clock.advance(0.05)
    rig.state = loaded(7.0, healthy=False)
    rig.publisher.tick()
    assert [s.version for s in rig.sent] == [1, 2, 3]
    last = rig.sent[-1]
    assert isinstance(last, Snapshot) and last.pools[0].members[0].healthy is False

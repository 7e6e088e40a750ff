"""`ManualControls`: operators' decisions made real on the registry, on a fake clock."""

from __future__ import annotations

from gateway.state.decisions import DecisionBook
from gateway.upstream.controls import ManualControls
from gateway.upstream.eligibility import eligible
from gateway.upstream.registry import Registry
from tests.gateway.conftest import make_config
from tests.support.clock import FakeClock


def setup() -> tuple[Registry, ManualControls, DecisionBook, FakeClock]:
    clock = FakeClock()
    registry = Registry(make_config(), clock)
    return registry, ManualControls(registry, clock), DecisionBook("gw"), clock


def ids(registry: Registry, clock: FakeClock) -> list[str]:
    return [r.id for r in eligible(registry.pools["p"], set(), clock.now())]


def test_a_drained_replica_takes_no_new_attempt_and_its_in_flight_ones_finish() -> None:
    registry, controls, book, clock = setup()
    r1 = registry.pools["p"].replicas[1]
    r1.started()  # one attempt in flight
    book.decide("replica:r1", "drain", "alice", "disk", clock.wall())
    changes = controls.apply(book.known)
    assert changes == [("replica:r1", "drained by alice: disk")]
    assert ids(registry, clock) == ["r0", "r2"]
    assert registry.pools["p"].draining == (r1,)
    r1.finished(0.01, None)  # the attempt ends on the same object
    assert r1.outstanding == 0
    assert controls.apply(book.known) == []  # idempotent
    book.decide("replica:r1", "restore", "bob", "", clock.wall())
    assert controls.apply(book.known) == [("replica:r1", "back in service")]
    assert sorted(ids(registry, clock)) == ["r0", "r1", "r2"]


def test_an_ejected_replica_comes_back_when_its_time_is_up() -> None:
    registry, controls, book, clock = setup()
    book.decide("replica:r0", "eject", "alice", "", clock.wall(), until=clock.wall() + 30)
    controls.apply(book.known)
    clock.advance(29)
    assert controls.apply(book.known) == [] and "r0" not in ids(registry, clock)
    clock.advance(1)
    assert controls.apply(book.known) == [("replica:r0", "back in service")]
    assert "r0" in ids(registry, clock)


def test_panic_mode_does_not_bring_a_drained_replica_back() -> None:
    registry, controls, book, clock = setup()
    for replica in registry.pools["p"].replicas[1:]:
        replica.mark_health(False)  # r0 alone is usable: panic would spread over all
    book.decide("replica:r0", "drain", "alice", "", clock.wall())
    controls.apply(book.known)
    assert "r0" not in ids(registry, clock)


def test_a_paused_pool_has_no_eligible_replica_until_resumed() -> None:
    registry, controls, book, clock = setup()
    book.decide("pool:p", "pause", "carol", "maintenance", clock.wall())
    controls.apply(book.known)
    assert ids(registry, clock) == []
    assert registry.pools["p"].paused == "paused by carol: maintenance"
    assert registry.snapshot()[0]["paused"] == "paused by carol: maintenance"
    book.decide("pool:p", "resume", "carol", "", clock.wall())
    assert controls.apply(book.known) == [("pool:p", "resumed")]
    assert len(ids(registry, clock)) == 3 and registry.pools["p"].paused is None


def test_a_restore_never_rejoins_a_replica_that_discovery_is_draining() -> None:
    registry, controls, book, clock = setup()
    pool = registry.pools["p"]
    registry.drain(pool, "r2")  # DNS dropped it
    book.decide("replica:r2", "restore", "alice", "", clock.wall())
    assert controls.apply(book.known) == []
    assert [r.id for r in pool.draining] == ["r2"]


def test_a_new_registry_obeys_the_decisions_at_once() -> None:
    """A reload's (or a restart's) registry: the same decisions, applied again."""
    _, _, book, clock = setup()
    book.decide("replica:r1", "drain", "alice", "", clock.wall())
    registry = Registry(make_config(), clock)
    ManualControls(registry, clock).apply(book.known)
    assert ids(registry, clock) == ["r0", "r2"]


def test_discovery_listing_a_held_replica_again_does_not_bring_it_back() -> None:
    from gateway.config.replica import ReplicaConfig

    registry, controls, book, clock = setup()
    book.decide("replica:r1", "drain", "alice", "", clock.wall())
    controls.apply(book.known)
    pool = registry.pools["p"]
    registry.add(pool, ReplicaConfig(id="r1", url="http://127.0.0.1:9001"))  # a DNS refresh
    assert "r1" not in ids(registry, clock) and [r.id for r in pool.draining] == ["r1"]
    book.decide("replica:r1", "restore", "alice", "", clock.wall())
    controls.apply(book.known)
    assert "r1" in ids(registry, clock) and pool.held == frozenset()


def test_a_replica_held_before_the_probes_start_is_probed_all_the_same() -> None:
    import random

    from gateway.upstream.probes.health import HealthProber
    from tests.gateway.fakes import FakeTransport

    registry, controls, book, clock = setup()
    book.decide("replica:r1", "drain", "alice", "", clock.wall())  # read back at start
    controls.apply(book.known)
    prober = HealthProber(registry, FakeTransport(), clock, random.Random(0))
    loops = prober.loops()
    try:
        assert sorted(name for name, _ in loops) == ["probe:r0", "probe:r1", "probe:r2"]
    finally:
        for _, loop in loops:
            loop.close()  # never started


def test_drains_from_another_gateway_hold_within_the_pools_ejected_share_cap() -> None:
    clock = FakeClock()
    registry = Registry(make_config(), clock)  # pool p: r0, r1, r2; 50 % may be out
    controls = ManualControls(registry, clock, "gw-b")
    forger = DecisionBook("gw-x")  # a forged "drain every replica", as read from the store
    for rid in ("r0", "r1", "r2"):
        forger.decide(f"replica:{rid}", "drain", "alice", "", clock.wall())
    controls.apply(forger.known)
    assert len(ids(registry, clock)) == 2  # one drained: what an outlier ejection could do
    assert set(controls.refused) == {"r1", "r2"}
    view = controls.snapshot(forger.known)
    assert [v["holds"] for v in view.values()] == [True, False, False]
    local = DecisionBook("gw-b")  # this gateway's own operator drains are obeyed in full
    for rid in ("r0", "r1", "r2"):
        local.decide(f"replica:{rid}", "drain", "bob", "", clock.wall())
    controls.apply(local.known)
    assert ids(registry, clock) == [] and controls.refused == {}

"""`FleetBeacon` on a fake clock: each replica's verdict word and the rates a heartbeat carries."""

from __future__ import annotations

from gateway.control.fleet import FleetBeacon
from gateway.state.decisions import DecisionBook
from gateway.telemetry.history_buffers import SampleRing
from gateway.upstream.registry import Registry
from tests.gateway.conftest import make_config
from tests.support.clock import FakeClock


def _row(t: float, rate: float, error_share: float | None) -> dict[str, object]:
    return {"t": t, "models": {"digits": {"rate": rate, "error_share": error_share}}}


def test_a_heartbeat_tells_each_replica_verdict_and_the_recent_rates() -> None:
    clock = FakeClock()
    registry = Registry(make_config(replicas=5), clock)
    book = DecisionBook("gw-a")
    samples = SampleRing(600)
    beacon = FleetBeacon("gw-a", registry, samples, book.get, clock, started=clock.wall() - 60)
    r0, r1, r2, r3, r4 = registry.pools["p"].replicas
    for replica in (r0, r1, r3, r4):
        replica.mark_health(True)
    r1.eject(clock.now(), 30.0, "5 failures in a row")
    r2.mark_health(False)
    book.decide("replica:r3", "drain", "alice", "disk", clock.wall())
    assert r4.breaker is not None
    r4.breaker.force("open")
    for age in (20.0, 9.0, 5.0):  # the one 20 s ago is outside the rate window
        samples.append(_row(clock.wall() - age, 100.0 if age > 10 else 10.0, 0.5))
    samples.append(_row(clock.wall(), 20.0, None))  # a second without answers has no share
    beat = beacon.heartbeat()
    assert beat.verdicts == {
        "r0": "serving",
        "r1": "ejected",
        "r2": "unhealthy",
        "r3": "drained",
        "r4": "breaker open",
    }
    assert beat.rate == round(40.0 / 3, 3)  # 10 + 10 + 20 answers over three samples
    assert beat.error_rate == 0.25  # 5 + 5 of 40
    assert (beat.instance, beat.seen, beat.started) == ("gw-a", clock.wall(), clock.wall() - 60)
    clock.advance(30.0)
    assert beacon.heartbeat().verdicts["r1"] == "serving"  # the ejection ran out


def test_a_quiet_gateway_reports_no_traffic() -> None:
    clock = FakeClock()
    registry = Registry(make_config(replicas=1), clock)
    beacon = FleetBeacon("gw", registry, SampleRing(10), DecisionBook("gw").get, clock, 0.0)
    beat = beacon.heartbeat()
    assert (beat.rate, beat.error_rate, beat.verdicts) == (0.0, 0.0, {"r0": "not probed"})

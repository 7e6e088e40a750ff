"""The dashboard's history on a fake clock: per-second rows, the timeline, bounds, a reload."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.config.replica import ReplicaConfig
from gateway.control.carry_over import carry_over
from gateway.control.runtime import Gateway
from gateway.telemetry.history_buffers import Event, EventLog, LatencySketch, SampleRing
from gateway.upstream.replica import Replica
from tests.support.clock import FakeClock

CONFIG: dict[str, Any] = {
    "pools": {
        "p": {
            "model": "m",
            "outlier": {"base_ejection_s": 10, "max_ejection_percent": 100},
            "replicas": [
                {"id": "r0", "url": "http://127.0.0.1:9000"},
                {"id": "r1", "url": "http://127.0.0.1:9001"},
            ],
        }
    },
    "models": {
        "digits": {
            "pool": "p",
            "slos": [{"name": "availability", "kind": "availability", "objective": 0.99}],
            "burn_policy": {"enabled": True},
        }
    },
}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def gw(clock: FakeClock) -> Gateway:
    return Gateway(parse_config(CONFIG), clock=clock)


def replica(gw: Gateway, replica_id: str) -> Replica:
    found = gw.registry.replica(replica_id)
    assert found is not None
    return found


def kinds(gw: Gateway) -> list[tuple[str, str, str]]:
    """The timeline oldest first, as (kind, subject, detail)."""
    return [(e.kind, e.subject, e.detail) for e in reversed(gw.history.events.newest_first())]


def test_the_sketch_finds_quantiles_within_its_bucket_width() -> None:
    sketch = LatencySketch()
    assert sketch.quantile(0.5) is None
    for ms in range(1, 1001):
        sketch.add(ms / 1000)
    p50, p99 = sketch.quantile(0.5), sketch.quantile(0.99)
    assert p50 is not None and p99 is not None
    assert p50 == pytest.approx(0.5, rel=0.03) and p99 == pytest.approx(0.99, rel=0.03)
    sketch.add(0.0)  # zero and sub-floor latencies share the first bucket
    assert (sketch.quantile(0.0) or 1) < 1e-4


def test_a_sample_holds_the_seconds_rate_shares_and_percentiles(
    gw: Gateway, clock: FakeClock
) -> None:
    for _ in range(7):
        gw.observe("digits", 200, "r0", 0.010, None)
    gw.observe("digits", 200, "fallback/digits-fallback", 0.020, "no_replica")
    gw.observe("digits", 200, "vote", 0.020, "vote_no_quorum")
    gw.observe("digits", 503, "none", 0.100, None)
    gw.observe("unknown-model", 404, "none", 0.001, None)  # not configured: not charted
    clock.advance(2.0)
    gw.history.sample()
    clock.advance(1.0)
    gw.history.sample()  # a quiet second: no answers, no shares
    doc = gw.history.to_json()
    m = doc["models"]["digits"]
    assert doc["t"] == [clock.wall() - 1.0, clock.wall()] and doc["as_of"] == clock.wall()
    assert m["rate"] == [5.0, 0.0]  # 10 answers over the 2 s since the recorder started
    assert m["error_share"] == [0.1, None] and m["degraded_share"] == [0.2, None]
    assert m["fallback_share"] == [0.1, None]
    assert m["p50_ms"][0] == pytest.approx(10, rel=0.03)
    assert m["p99_ms"][0] == pytest.approx(100, rel=0.03) and m["p99_ms"][1] is None
    assert m["slo"]["availability"]["budget_remaining"][0] is not None
    assert doc["pools"]["p"] == {
        "healthy": [0, 0],
        "ejected": [0, 0],
        "quarantined": [0, 0],
        "open_breakers": [0, 0],
    }
    assert doc["retry_budget"][0] == gw.budget.balance()


def test_rows_and_events_are_bounded_and_a_window_can_be_asked(clock: FakeClock) -> None:
    ring, log = SampleRing(3), EventLog(2)
    for i in range(5):
        ring.append({"t": float(i)})
        log.record(Event(float(i), "breaker", "r0", f"#{i}"))
    assert [r["t"] for r in ring] == [2.0, 3.0, 4.0] and [r["t"] for r in ring.since(3.5)] == [4.0]
    assert [e.detail for e in log.newest_first()] == ["#4", "#3"]
    assert log.counts["breaker"] == 5  # counts are of every event ever, not only those kept
    with pytest.raises(ValueError, match="level"):
        log.record(Event(0.0, "x", "y", "z", level="purple"))
    gw = Gateway(parse_config(CONFIG), clock=clock)
    for _ in range(4):
        clock.advance(1.0)
        gw.history.sample()
    assert len(gw.history.to_json(seconds=1.5)["t"]) == 2
    assert len(gw.history.to_json(events=0)["events"]) == 0


def test_the_timeline_keeps_an_ejection_after_it_expires(gw: Gateway, clock: FakeClock) -> None:
    r0 = replica(gw, "r0")
    gw.history.sample()
    pool = gw.registry.pools["p"]
    assert pool.outlier.eject(r0, "5 consecutive failures")
    gw.registry.events.ejection("r0", "consecutive_failures")
    ejected_at = clock.wall()
    clock.advance(1.0)
    gw.history.sample()
    assert gw.history.to_json()["replicas"]["r0"]["ejected_since"] == ejected_at
    assert gw.history.to_json()["pools"]["p"]["ejected"][-1] == 1
    clock.advance(10.0)
    gw.history.sample()
    assert kinds(gw) == [
        ("ejection", "r0", "5 consecutive failures (for 10 s)"),
        ("ejection", "r0", "ejection ended"),
    ]
    assert gw.history.to_json()["replicas"]["r0"]["ejected_since"] is None


def test_health_breaker_and_quarantine_changes_reach_the_timeline(
    gw: Gateway, clock: FakeClock
) -> None:
    r0, r1 = replica(gw, "r0"), replica(gw, "r1")
    r0.mark_health(True)
    r1.mark_health(True)
    gw.history.sample()  # first verdicts (unknown -> healthy) are not news
    r0.probe_failed("connect refused")
    r0.mark_health(False)
    assert r1.breaker is not None
    r1.breaker.force("open")
    gw.registry.quarantine(r1, 60, "golden answer 7 != 3", "golden")
    clock.advance(1.0)
    gw.history.sample()
    down = gw.history.to_json()["replicas"]["r0"]["unhealthy_since"]
    assert down == clock.wall()
    r0.mark_health(True)
    clock.advance(61.0)
    gw.history.sample()
    assert kinds(gw) == [
        ("breaker", "r1", "closed → open"),
        ("quarantine", "r1", "golden answer 7 != 3 (for 60 s)"),
        ("health", "r0", "unhealthy: connect refused"),
        ("breaker", "r1", "open → half-open"),  # read when sampled, after its reset timeout
        ("health", "r0", "healthy again"),
        ("quarantine", "r1", "quarantine ended"),
    ]
    levels = [e.level for e in reversed(gw.history.events.newest_first())]
    assert levels == ["bad", "bad", "bad", "warn", "ok", "ok"]
    assert gw.history.to_json()["event_counts"] == {"breaker": 2, "quarantine": 2, "health": 2}


def test_fallback_answers_switch_in_and_out_and_the_burn_policy_is_told(
    gw: Gateway, clock: FakeClock
) -> None:
    gw.history.sample()
    for _ in range(20):
        gw.observe("digits", 200, "fallback/digits-fallback", 0.002, "no_replica")
        gw.observe("digits", 503, "none", 0.002, None)
    gw.slo.evaluate()
    clock.advance(1.0)
    gw.history.sample()
    clock.advance(1.0)
    gw.history.sample()  # still within the quiet time: no switch back yet
    first, second, *alerts = [k for k, _, _ in kinds(gw)]
    assert (first, second) == ("fallback", "burn-policy") and set(alerts) == {"slo-alert"}
    assert kinds(gw)[0][2] == "answering from the fallback: no_replica ×20"
    assert kinds(gw)[1][2].startswith("fast burn")
    clock.advance(5.0)
    gw.history.sample()
    assert kinds(gw)[-1] == ("fallback", "digits", "primary path answers again")


def test_a_record_event_and_a_reload_keep_the_history(gw: Gateway, clock: FakeClock) -> None:
    gw.history.record_event("reload", "config", "reloaded from x.yaml")
    clock.advance(1.0)
    gw.history.sample()
    data = copy.deepcopy(CONFIG)
    data["pools"]["p"]["replicas"].pop()
    fresh = Gateway(parse_config(data), clock=clock)
    carry_over(gw, fresh)
    doc = fresh.history.to_json()
    assert len(doc["t"]) == 1 and doc["event_counts"] == {"reload": 2}
    assert [e["detail"] for e in doc["events"]] == [
        "reloaded; 1 replicas' history kept",
        "reloaded from x.yaml",
    ]


def test_a_replica_that_left_leaves_the_history_and_one_carried_keeps_it(
    gw: Gateway, clock: FakeClock
) -> None:
    pool = gw.registry.pools["p"]
    joined = gw.registry.add(pool, ReplicaConfig(id="p-10.0.0.9-8000", url="http://10.0.0.9:8000"))
    gw.history.sample()
    assert joined.id in gw.history.to_json()["replicas"]
    replica(gw, "r0").mark_health(False)
    clock.advance(1.0)
    gw.history.sample()
    since = gw.history.to_json()["replicas"]["r0"]["unhealthy_since"]
    assert since is not None

    fresh = Gateway(parse_config(CONFIG), clock=clock)
    fresh.registry.add(fresh.registry.pools["p"], ReplicaConfig(id=joined.id, url=joined.url))
    carry_over(gw, fresh)  # as a discovered pool's members are carried over
    assert set(fresh.history.to_json()["replicas"]) == {"r0", "r1", joined.id}
    assert fresh.history.to_json()["replicas"]["r0"]["unhealthy_since"] == since

    assert gw.registry.drain(pool, joined.id) is joined
    assert gw.registry.release(pool, joined)
    clock.advance(1.0)
    gw.history.sample()
    assert set(gw.history.to_json()["replicas"]) == {"r0", "r1"}  # not kept for ever


def test_a_replica_last_error_is_stamped_when_it_happened(gw: Gateway, clock: FakeClock) -> None:
    r0 = replica(gw, "r0")
    gw.history.sample()
    assert gw.history.to_json()["replicas"]["r0"]["last_error_at"] is None
    r0.probe_failed("Connection refused")
    clock.advance(1)
    gw.history.sample()
    failed_at = clock.wall()
    r0.probe_passed()  # recovered: the error stays on the replica, its time with it
    clock.advance(30)
    gw.history.sample()
    assert gw.history.to_json()["replicas"]["r0"]["last_error_at"] == failed_at
    r0.probe_failed("Connection refused")  # the same message again is a new error
    clock.advance(1)
    gw.history.sample()
    assert gw.history.to_json()["replicas"]["r0"]["last_error_at"] == clock.wall()

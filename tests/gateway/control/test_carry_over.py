"""A reload's carry-over on a fake clock: what stays keeps its state, what changed starts new."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.config.replica import ReplicaConfig
from gateway.control.carry_over import carry_over
from gateway.control.runtime import Gateway
from gateway.errors import TooManyRequests
from gateway.upstream.breaker import CLOSED, HALF_OPEN, OPEN
from gateway.upstream.replica import Replica
from tests.support.clock import FakeClock

SLOS = [
    {"name": "availability", "kind": "availability", "objective": 0.99},
    {"name": "fast", "kind": "latency", "objective": 0.99, "threshold_ms": 50},
]
BASE: dict[str, Any] = {
    "pools": {
        "p": {
            "model": "m",
            "breaker": {"failure_threshold": 2, "reset_timeout_s": 30},
            "replicas": [
                {"id": "stays", "url": "http://127.0.0.1:9000"},
                {"id": "moves", "url": "http://127.0.0.1:9001"},
                {"id": "gone", "url": "http://127.0.0.1:9002"},
            ],
        }
    },
    "models": {
        "digits": {"pool": "p", "slos": SLOS, "burn_policy": {"enabled": True}},
        "other": {"pool": "p", "slos": SLOS[:1]},
    },
}


def gateway(data: dict[str, Any], clock: FakeClock) -> Gateway:
    return Gateway(parse_config(data), clock=clock)


def replica(gw: Gateway, replica_id: str) -> Replica:
    found = gw.registry.replica(replica_id)
    assert found is not None
    return found


def reloaded() -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    replicas = data["pools"]["p"]["replicas"]
    replicas[1]["url"] = "http://127.0.0.1:9101"  # another server under the same id
    replicas[2] = {"id": "new", "url": "http://127.0.0.1:9003"}
    data["models"]["digits"]["slos"][1]["threshold_ms"] = 80  # "fast" now means another thing
    data["models"]["digits"]["slos"][0]["objective"] = 0.999  # same events, a stricter goal
    del data["models"]["other"]
    return data


def test_replicas_that_stay_keep_quarantine_ejection_health_and_breaker() -> None:
    clock = FakeClock()
    old = gateway(BASE, clock)
    stays, moves = replica(old, "stays"), replica(old, "moves")
    for r in (stays, moves):
        r.mark_health(True)
        old.registry.quarantine(r, 300.0, "golden probe: 2/8 right", "golden_probe")
        r.eject(clock.now(), 10.0, "5 consecutive failures")
        assert r.breaker is not None
        r.breaker.force(OPEN)
    old.registry.pools["p"].latency.record(0.012)
    clock.advance(20.0)

    new = gateway(reloaded(), clock)
    carried = carry_over(old, new)
    assert carried["replicas"] == ["p/stays"]

    kept = replica(new, "stays")
    assert kept is not stays and kept.healthy is True
    assert kept.quarantined_until == stays.quarantined_until > clock.now()
    assert kept.quarantine_reason == "golden probe: 2/8 right"
    assert kept.ejections == 1 and kept.ejection_reason == "5 consecutive failures"
    assert kept.outstanding == 0
    assert kept.breaker is not None and kept.breaker.state() == OPEN
    assert new.registry.pools["p"].latency.count == 1
    snapshot = kept.snapshot(clock.now())
    assert snapshot["quarantined"] and snapshot["breaker"]["state"] == OPEN

    clock.advance(10.0)  # the old breaker opened 30 s ago: half-open now, not 30 s from reload
    assert kept.breaker.state() == HALF_OPEN

    for fresh_id in ("moves", "new"):  # a new URL is another server: nothing carried
        fresh = replica(new, fresh_id)
        assert fresh.healthy is None and fresh.quarantined_until == 0.0
        assert fresh.breaker is not None and fresh.breaker.state() == CLOSED


def test_a_carried_open_breaker_is_announced_to_metrics() -> None:
    clock = FakeClock()
    old = gateway(BASE, clock)
    breaker = replica(old, "stays").breaker
    assert breaker is not None
    breaker.force(OPEN)
    new = gateway(BASE, clock)
    carry_over(old, new)
    scrape = new.metrics.render(None)[0].decode()
    labels = 'model="m",pool="p",replica="stays"'
    assert f'gateway_breaker_state{{{labels},state="open"}} 1.0' in scrape
    assert f'gateway_breaker_state{{{labels},state="closed"}} 0.0' in scrape


def test_slo_history_alerts_and_policy_stay_for_slos_that_mean_the_same() -> None:
    clock = FakeClock()
    old = gateway(BASE, clock)
    for _ in range(50):
        old.observe("digits", 503, "stays", 0.01, None)
        old.observe("digits", 200, "stays", 0.01, None)
    old.slo.evaluate()
    assert old.slo.fast_burn("digits") and old.slo.adjustment("digits").reason

    new = gateway(reloaded(), clock)
    carried = carry_over(old, new)
    assert carried["slos"] == ["digits/availability"]  # "fast" changed threshold; "other" gone

    doc = {s["name"]: s for s in new.slo.to_json()["models"]["digits"]["slos"]}
    availability = doc["availability"]
    assert availability["events"]["total"] == 100 and availability["events"]["bad"] == 50
    assert availability["objective"] == 0.999  # the new goal over the old events
    assert any(a["firing"] for a in availability["alerts"])
    assert doc["fast"]["events"]["total"] == 0
    assert new.slo.fast_burn("digits")
    assert new.slo.adjustment("digits").retry_budget_factor < 1.0  # the burn policy holds

    new.observe("digits", 200, "stays", 0.01, None)  # the carried window keeps counting
    assert new.slo.to_json()["models"]["digits"]["slos"][0]["events"]["total"] == 101


def discovered(dns: str = "digits.test") -> dict[str, Any]:
    pool = {"model": "m", "discovery": {"dns": dns, "port": 8000, "interval_s": 5}}
    return {"pools": {"p": pool}, "models": {"digits": {"pool": "p"}}}


def test_a_discovered_pool_keeps_its_members_and_their_verdicts() -> None:
    clock = FakeClock()
    old = gateway(discovered(), clock)
    pool = old.registry.pools["p"]
    for host in ("10.0.0.1", "10.0.0.2"):
        joined = old.registry.add(
            pool,
            ReplicaConfig(id=f"p-{host}", url=f"http://{host}:8000", standby=host.endswith("2")),
        )
        joined.mark_health(True)
    old.registry.quarantine(replica(old, "p-10.0.0.2"), 300.0, "golden probe: 2/8", "golden")

    new = gateway(discovered(), clock)  # as a reload builds it: discovered pools start empty
    assert new.registry.pools["p"].replicas == ()
    carried = carry_over(old, new)
    assert carried["replicas"] == ["p/p-10.0.0.1", "p/p-10.0.0.2"]
    assert replica(new, "p-10.0.0.1").healthy is True  # serving at once, no probe awaited
    assert replica(new, "p-10.0.0.2").quarantined_until > clock.now()
    assert [replica(new, f"p-10.0.0.{i}").standby for i in (1, 2)] == [False, True]

    elsewhere = gateway(discovered("other.test"), clock)  # another question: DNS decides
    assert carry_over(old, elsewhere)["replicas"] == []
    assert elsewhere.registry.pools["p"].replicas == ()


def test_tenant_limiters_and_the_retry_budget_window_stay_while_their_config_does() -> None:
    clock = FakeClock()
    data = copy.deepcopy(BASE)
    data["tenants"] = {
        "steady": {"key_env": "STEADY_KEY", "max_in_flight": 2, "rate_per_s": 1, "burst": 1},
        "changed": {"key_env": "CHANGED_KEY", "max_in_flight": 2},
    }
    old = gateway(data, clock)
    steady = old.tenants.get("steady")
    steady.enter()  # in flight on the old gateway, its one token spent
    for _ in range(50):
        old.budget.record_request()
    assert old.budget.try_spend()

    data["tenants"]["changed"]["max_in_flight"] = 3
    new = gateway(data, clock)
    carried = carry_over(old, new)
    assert carried["tenants"] == ["steady"] and carried["retry_budget"] == ["window"]
    assert new.tenants.get("steady") is steady  # its bound counts the old gateway's request
    with pytest.raises(TooManyRequests, match="over its rate"):
        new.tenants.get("steady").enter()  # no second burst for a reload
    assert new.tenants.get("changed") is not old.tenants.get("changed")
    window = new.budget.snapshot()
    assert window["requests_in_window"] == 50 and window["retries_in_window"] == 1

    data["retry_budget"] = {"ratio": 0.5}
    fresh = gateway(data, clock)
    assert carry_over(old, fresh)["retry_budget"] == []
    assert fresh.budget.snapshot()["requests_in_window"] == 0

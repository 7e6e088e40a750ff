"""A deadline shorter than an SLO's floor is the client's choice: counted apart, never burned."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.slo.config import DEFAULT_MIN_DEADLINE_MS, BurnPolicyConfig, SloConfig
from gateway.slo.engine import SloBook
from tests.support.clock import FakeClock

AVAILABILITY = SloConfig(name="avail", kind="availability", objective=0.999)
LATENCY = SloConfig(name="fast", kind="latency", objective=0.99, threshold_ms=50)


def book() -> tuple[SloBook, FakeClock]:
    clock = FakeClock()
    policies = {"digits": BurnPolicyConfig(enabled=True)}
    return SloBook({"digits": (AVAILABILITY, LATENCY)}, clock, policies=policies), clock


def test_sixty_requests_with_a_microsecond_deadline_leave_the_budget_intact() -> None:
    slos, clock = book()
    for _ in range(60):
        slos.record("digits", 504, 0.0001, deadline_s=0.000001)  # x-request-timeout-ms: 0.001
        clock.advance(0.5)
    doc = slos.to_json()["models"]["digits"]
    assert not doc["fast_burn"] and not doc["policy"]["engaged"]
    for slo in doc["slos"]:
        assert slo["events"]["total"] == 0
        assert slo["error_budget"]["remaining"] == 1.0
        assert not any(alert["firing"] for alert in slo["alerts"])
        assert slo["excluded"]["short_deadline"] == 60
    assert [s["excluded"]["min_deadline_ms"] for s in doc["slos"]] == [DEFAULT_MIN_DEADLINE_MS, 50]


def test_the_services_own_failures_still_burn_and_engage_the_policy() -> None:
    slos, clock = book()
    for i in range(600):
        deadline = None if i % 2 else 1.0  # no header, or a deadline above every floor
        slos.record("digits", 503, 0.001, deadline_s=deadline)
        clock.advance(0.5)
    doc = slos.to_json()["models"]["digits"]
    assert doc["fast_burn"] and doc["policy"]["engaged"]
    assert (
        doc["slos"][0]["events"]["bad"] == 600 and doc["slos"][0]["excluded"]["short_deadline"] == 0
    )


def test_the_floor_is_the_latency_threshold_or_the_configured_one() -> None:
    slos, _ = book()
    slos.record("digits", 504, 0.03, deadline_s=0.03)  # under 50 ms: not the latency SLO's
    availability, latency = slos.trackers["digits"]
    assert (availability.excluded, latency.excluded) == (1, 1)
    slos.record("digits", 200, 0.06, deadline_s=0.2)  # 200 ms allowed, 60 ms taken: slow
    assert latency.budget()["events"] == {"total": 1, "good": 0, "bad": 1, "degraded": 0}
    assert availability.budget()["events"]["good"] == 1
    floor = SloConfig(name="a", kind="availability", objective=0.9, min_deadline_ms=5)
    assert floor.min_deadline_s == 0.005
    with pytest.raises(ValidationError):
        SloConfig(name="a", kind="availability", objective=0.9, min_deadline_ms=0)

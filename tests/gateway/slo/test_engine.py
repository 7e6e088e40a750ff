from __future__ import annotations

import orjson
import pytest

from gateway.slo.config import SloConfig
from gateway.slo.engine import SloBook, SloTracker
from tests.gateway.slo.traffic import traffic
from tests.support.clock import FakeClock

AVAILABILITY = SloConfig(name="avail", kind="availability", objective=0.999)


def _book(*slos: SloConfig) -> tuple[SloBook, FakeClock]:
    clock = FakeClock()
    return SloBook({"digits": slos or (AVAILABILITY,)}, clock), clock


def _alerts(book: SloBook, slo: int = 0) -> dict[str, bool]:
    return {a.rule.name: a.firing for a in book.trackers["digits"][slo].alerts}


def test_budget_math_matches_hand_computed_numbers() -> None:
    clock = FakeClock()
    tracker = SloTracker("digits", SloConfig(name="a", kind="availability", objective=0.99), clock)
    for i in range(1000):
        tracker.record(503 if i < 5 else 200, 0.01)
    budget = tracker.budget()
    # 1000 events may include 1 % = 10 bad ones; 5 bad consumed half of the budget
    assert budget["events"] == {"total": 1000, "good": 995, "bad": 5, "degraded": 0}
    assert budget["sli"] == 0.995
    assert budget["error_budget"] == {
        "allowed_bad": 10.0,
        "consumed": 0.5,
        "remaining": 0.5,
        "remaining_events": 5.0,
    }
    # error rate 0.5 % against an allowed 1 %: burning at half the sustainable rate
    assert tracker.burn_rate(300) == pytest.approx(0.5)
    clock.advance(400)
    assert tracker.burn_rate(300) == 0.0  # no events in the last 5 min
    assert tracker.burn_rate(3600) == pytest.approx(0.5)


def test_an_overspent_budget_goes_negative() -> None:
    tracker = SloTracker("digits", AVAILABILITY, FakeClock())
    for status in (200, 500, 500, 200):
        tracker.record(status, 0.01)
    budget = tracker.budget()["error_budget"]
    assert budget["consumed"] == pytest.approx(500.0)  # 50 % errors against 0.1 % allowed
    assert budget["remaining"] == pytest.approx(-499.0)


def test_error_burst_fires_fast_burn_alerts_and_they_stop_after_their_short_windows() -> None:
    book, clock = _book()
    traffic(book, clock, 3600)  # an hour of good traffic
    book.evaluate()
    assert not book.fast_burn("digits")
    burst_at = clock.wall()
    traffic(book, clock, 300, errors=5)  # 5 min at 50 % errors
    book.evaluate()
    # burn = error rate / 0.1 %: 5m 500x, 30m 1500/18000 = 83x, 1h 1500/36000 = 42x,
    # 6h (65 min seen) 1500/39000 = 38x
    assert _alerts(book) == {"page-1h-5m": True, "page-6h-30m": True, "ticket-3d-6h": True}
    assert book.fast_burn("digits")
    page = book.trackers["digits"][0].alerts[0]
    assert page.since == burst_at + 300
    traffic(book, clock, 300)  # recovered: the 5 min short window empties of errors
    book.evaluate()
    firing = _alerts(book)
    assert not firing["page-1h-5m"] and firing["page-6h-30m"]
    assert page.since == burst_at + 600
    traffic(book, clock, 1500)  # 30 min after the burst the 6h/30m page stops too
    book.evaluate()
    assert not _alerts(book)["page-6h-30m"]
    assert not book.fast_burn("digits")
    assert _alerts(book)["ticket-3d-6h"]  # the slow-burn ticket (3d/6h at 1x) still stands


def test_a_short_spike_alone_does_not_page() -> None:
    book, clock = _book()
    traffic(book, clock, 3 * 3600)
    traffic(book, clock, 20, errors=10)  # 20 s of total failure: 5m burns, 1h does not
    book.evaluate()
    tracker = book.trackers["digits"][0]
    assert tracker.burn_rates["5m"] > 14.4
    assert tracker.burn_rates["1h"] < 14.4
    assert not book.fast_burn("digits")


def test_latency_slo_counts_slow_and_failed_answers_as_bad() -> None:
    slo = SloConfig(name="fast", kind="latency", objective=0.9, threshold_ms=100)
    tracker = SloTracker("digits", slo, FakeClock())
    tracker.record(200, 0.050)
    tracker.record(200, 0.100)  # exactly at the threshold: good
    tracker.record(200, 0.101)
    tracker.record(503, 0.001)  # fast, but no answer
    tracker.record(404, 0.001)  # a client error is answered
    assert tracker.budget()["events"] == {"total": 5, "good": 3, "bad": 2, "degraded": 0}


def test_degraded_answers_are_good_for_availability_and_reported() -> None:
    tracker = SloTracker("digits", AVAILABILITY, FakeClock())
    tracker.record(200, 0.01, degraded=True)
    tracker.record(200, 0.01)
    report = tracker.to_json()
    assert report["events"] == {"total": 2, "good": 2, "bad": 0, "degraded": 1}
    assert report["degraded_fraction"] == 0.5
    assert report["error_budget"]["consumed"] == 0.0


def test_tenant_slo_counts_only_its_tenant() -> None:
    acme = SloConfig(name="acme", kind="availability", objective=0.99, tenant="acme")
    book, _ = _book(AVAILABILITY, acme)
    book.record("digits", 500, 0.01, tenant="acme")
    book.record("digits", 200, 0.01, tenant="other")
    book.record("digits", 200, 0.01)
    all_, only_acme = (t.window.counts(300) for t in book.trackers["digits"])
    assert (all_.total, all_.bad) == (3, 1)
    assert (only_acme.total, only_acme.bad) == (1, 1)
    book.record("unknown-model", 500, 0.01)  # no SLOs: ignored


def test_fast_burn_verdict_is_cached_between_evaluations() -> None:
    book, clock = _book()
    traffic(book, clock, 600)
    assert not book.fast_burn("digits")  # evaluated now
    for _ in range(100):
        book.record("digits", 503, 0.01)
    assert not book.fast_burn("digits")  # within eval_interval_s: the cached verdict
    clock.advance(1.0)
    assert book.fast_burn("digits")


def test_the_request_paths_read_of_a_burn_evaluates_nothing() -> None:
    book, clock = _book()
    folds: list[float] = []
    book.before_read = lambda: folds.append(clock.now())
    traffic(book, clock, 600)
    book.evaluate()
    for _ in range(100):
        book.record("digits", 503, 0.01)
    clock.advance(5.0)  # long past the interval: still the last evaluation's verdict
    assert not book.burning("digits") and len(folds) == 1
    book.evaluate()  # the background roller's
    assert book.burning("digits") and len(folds) == 2


def test_slo_document_is_json_with_everything() -> None:
    book, clock = _book(
        AVAILABILITY, SloConfig(name="p99", kind="latency", objective=0.99, threshold_ms=250)
    )
    traffic(book, clock, 60, errors=1)
    doc = orjson.loads(orjson.dumps(book.to_json()))
    model = doc["models"]["digits"]
    assert model["fast_burn"] is True
    assert model["policy"]["enabled"] is False and model["policy"]["engaged"] is False
    avail = model["slos"][0]
    assert avail["name"] == "avail" and avail["objective"] == 0.999
    assert set(avail["burn_rates"]) == {"5m", "30m", "1h", "6h", "1d", "3d"}
    assert avail["burn_rates"]["5m"] == pytest.approx(100.0)  # 10 % errors / 0.1 %
    assert [a["name"] for a in avail["alerts"]] == ["page-1h-5m", "page-6h-30m", "ticket-3d-6h"]
    assert avail["alerts"][0]["firing"] is True and avail["alerts"][0]["since"] == clock.wall()
    assert [r["factor"] for r in doc["alert_rules"]] == [14.4, 6.0, 1.0]


def test_slo_config_validation() -> None:
    with pytest.raises(ValueError, match="threshold_ms"):
        SloConfig(name="x", kind="latency", objective=0.99)
    with pytest.raises(ValueError, match="threshold_ms"):
        SloConfig(name="x", kind="availability", objective=0.99, threshold_ms=10)
    with pytest.raises(ValueError):
        SloConfig(name="x", kind="availability", objective=1.0)
    with pytest.raises(ValueError):
        SloConfig(name="a:b", kind="availability", objective=0.9)  # unsafe in shared keys

"""Per-second and per-phase statistics, and pass/fail against objectives, on made-up events."""

from __future__ import annotations

import math

import pytest

from loadtests.chaos.events import Event
from loadtests.chaos.objectives import Objective, evaluate
from loadtests.chaos.stats import Run, Window, quantile, totals

T0 = 1_000_000.0


def ev(
    at: float,
    ms: float = 5.0,
    *,
    error: str = "",
    degraded: bool = False,
    wrong: bool = False,
    status: int = 200,
) -> Event:
    return Event(T0 + at, ms, "digits", 1, status if not error else 503, error, degraded, wrong)


def steady(seconds: int, per_s: int, ms: float = 5.0) -> list[Event]:
    return [ev(s + i / per_s, ms) for s in range(seconds) for i in range(per_s)]


def test_quantile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == 50.0
    assert quantile(values, 0.99) == 99.0
    assert quantile(values, 1.0) == 100.0
    assert quantile([7.0], 0.99) == 7.0
    assert math.isnan(quantile([], 0.5))


def test_totals_count_degraded_and_wrong_only_among_valid_answers() -> None:
    events = [
        ev(0),
        ev(0, degraded=True),
        ev(0, wrong=True),
        ev(0, error="status", degraded=True, wrong=True),
        ev(0, ms=1500),
    ]
    t = totals(events, seconds=2.0, deadline_ms=1000)
    assert (t.sent, t.failed, t.late, t.degraded, t.wrong) == (5, 1, 1, 1, 1)
    assert t.answered == 4
    assert t.rate == 2.5
    assert t.failed_rate == pytest.approx(0.2)
    assert t.degraded_rate == pytest.approx(0.25)
    assert t.wrong_rate == pytest.approx(0.25)
    assert t.max_ms == 1500


def test_empty_totals_have_zero_rates() -> None:
    t = totals([], seconds=0.0, deadline_ms=1000)
    assert (t.rate, t.failed_rate, t.degraded_rate, t.wrong_rate) == (0.0, 0.0, 0.0, 0.0)


def test_per_second_buckets_by_start_time() -> None:
    events = [*steady(3, 10), ev(1.5, ms=900.0, error="transport", status=0)]
    seconds = Run.of(events, 1000, T0).per_second()
    assert [s.sent for s in seconds] == [10, 11, 10]
    assert [s.failed for s in seconds] == [0, 1, 0]
    assert seconds[1].max_ms == 900.0
    assert seconds[0].p50_ms == 5.0


def test_a_last_second_less_than_half_run_is_left_out_of_the_series_not_the_totals() -> None:
    events = [*steady(2, 10), ev(2.2)]
    run = Run.of(events, 1000, T0)
    assert len(run.per_second()) == 2
    assert run.overall().sent == 21
    assert len(Run.of([*steady(2, 10), ev(2.6)], 1000, T0).per_second()) == 3


def test_time_zero_defaults_to_the_first_request() -> None:
    run = Run.of([ev(3.0), ev(2.0)], 1000)
    assert run.t0 == T0 + 2.0
    assert run.duration_s == pytest.approx(1.0)


def test_phases_split_at_the_fault_windows_and_skip_the_warm_up() -> None:
    events = steady(10, 10)
    phases = Run.of(events, 1000, T0).phases([Window(4.0, 5.0, "a"), Window(6.0, 7.0, "b")])
    assert phases["before"].sent == 30  # 1..4 s: the first second is warm-up
    assert phases["during"].sent == 30  # 4..7 s: first start to last end
    assert phases["after"].sent == 30  # 7 s to the last request
    assert phases["during"].seconds == pytest.approx(3.0)


def test_objective_passes_a_clean_run() -> None:
    run = Run.of(steady(10, 20), 1000, T0)
    verdict = evaluate(Objective(), run, [Window(3, 6)])
    assert verdict.passed, verdict.failures
    assert {c.name for c in verdict.checks} >= {"requests", "failed", "over deadline"}


@pytest.mark.parametrize(
    ("bad", "check"),
    [
        (ev(4.0, error="status"), "failed"),
        (ev(4.0, ms=1001.0), "over deadline"),
        (ev(4.0, wrong=True), "wrong answers"),
    ],
)
def test_one_bad_request_fails_a_strict_objective(bad: Event, check: str) -> None:
    run = Run.of([*steady(10, 20), bad], 1000, T0)
    verdict = evaluate(Objective(max_wrong_rate=0.0), run, [Window(3, 6)])
    assert not verdict.passed
    assert [c.name for c in verdict.failures] == [check]


def test_rates_within_the_bounds_pass() -> None:
    events = steady(10, 100)  # 1000 requests
    events[400] = ev(4.0, error="status")
    run = Run.of(events, 1000, T0)
    assert evaluate(Objective(max_failed_rate=0.001), run, []).passed
    assert not evaluate(Objective(max_failed_rate=0.0009), run, []).passed
    events[400] = ev(4.0, wrong=True)
    run = Run.of(events, 1000, T0)
    assert evaluate(Objective(max_wrong_rate=0.001), run, []).passed
    assert not evaluate(Objective(max_wrong_rate=0.0009), run, []).passed


def test_a_failure_at_the_end_fails_recovery_even_within_the_rate_bound() -> None:
    events = [*steady(10, 100), ev(9.5, error="status")]
    verdict = evaluate(Objective(max_failed_rate=0.01), Run.of(events, 1000, T0), [Window(3, 6)])
    assert [c.name for c in verdict.failures] == ["failed in last 2 s"]


def test_degraded_bounds_during_the_fault_and_at_the_end() -> None:
    events = [ev(s + i / 10, degraded=3 <= s < 6) for s in range(10) for i in range(10)]
    run = Run.of(events, 1000, T0)
    objective = Objective(min_degraded_during=0.5, max_degraded_end=0.0)
    assert evaluate(objective, run, [Window(3, 6)]).passed
    stuck = [ev(s + i / 10, degraded=s >= 3) for s in range(10) for i in range(10)]
    failures = evaluate(objective, Run.of(stuck, 1000, T0), [Window(3, 6)]).failures
    assert [c.name for c in failures] == ["degraded in last 2 s"]


def test_p99_bound_during_the_fault() -> None:
    events = [
        ev(s + i / 100, ms=50.0 if 3 <= s < 6 else 5.0) for s in range(10) for i in range(100)
    ]
    run = Run.of(events, 1000, T0)
    assert evaluate(Objective(max_p99_during_ms=60), run, [Window(3, 6)]).passed
    assert not evaluate(Objective(max_p99_during_ms=40), run, [Window(3, 6)]).passed


def test_a_run_without_requests_fails() -> None:
    verdict = evaluate(Objective(), Run.of([], 1000, T0), [])
    assert not verdict.passed
    assert "requests" in [c.name for c in verdict.failures]


def test_relaxed_objective_allows_one_percent_for_smoke_runs() -> None:
    strict = Objective()
    relaxed = strict.relaxed()
    assert (relaxed.max_failed_rate, relaxed.max_late_rate) == (0.01, 0.01)
    assert relaxed.max_wrong_rate == strict.max_wrong_rate
    assert Objective(max_failed_rate=0.05).relaxed().max_failed_rate == 0.05
    assert "failed ≤ 1 %" in relaxed.describe()

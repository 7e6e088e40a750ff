from __future__ import annotations

from gateway.clock import FakeClock
from gateway.config.policies import RetryBudgetConfig
from gateway.policies.budget import RetryBudget


def test_floor_allows_retries_with_no_traffic() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.2, min_per_s=1, window_s=10), FakeClock())
    assert sum(budget.try_spend() for _ in range(50)) == 10


def test_ratio_of_requests_on_top_of_the_floor() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.2, min_per_s=0, window_s=10), FakeClock())
    for _ in range(100):
        budget.record_request()
    assert sum(budget.try_spend() for _ in range(100)) == 20
    assert budget.refused_total == 80


def test_old_requests_leave_the_window() -> None:
    clock = FakeClock()
    budget = RetryBudget(RetryBudgetConfig(ratio=0.5, min_per_s=0, window_s=2), clock)
    for _ in range(10):
        budget.record_request()
    clock.advance(5)
    assert not budget.try_spend()
    budget.record_request()
    budget.record_request()
    assert budget.try_spend() and not budget.try_spend()


def test_snapshot() -> None:
    budget = RetryBudget(RetryBudgetConfig(), FakeClock())
    budget.record_request()
    snap = budget.snapshot()
    assert snap["requests_in_window"] == 1 and snap["balance"] == 100.2

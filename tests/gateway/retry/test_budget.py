from __future__ import annotations

from gateway.config.policies import RetryBudgetConfig
from gateway.retry.budget import RetryBudget
from tests.support.clock import FakeClock


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


def test_shared_counts_make_every_instance_see_all_traffic() -> None:
    clock = FakeClock()
    config = RetryBudgetConfig(ratio=0.2, min_per_s=0, window_s=10)
    a, b = RetryBudget(config, clock), RetryBudget(config, clock)
    shared_a, shared_b = a.share(), b.share()
    for _ in range(100):
        a.record_request()
    assert sum(a.try_spend() for _ in range(30)) == 20
    deltas = shared_a.export_deltas()
    assert sum(d.amount for k, d in deltas.items() if k.endswith(":req")) == 100
    assert shared_a.export_deltas() == {}  # exported once
    shared_b.apply_remote({k: d.amount for k, d in deltas.items()}, full=True)
    assert b.snapshot()["requests_in_window"] == 100
    assert b.snapshot()["retries_in_window"] == 20
    assert not b.try_spend()  # a's retries used up the budget both of them share
    clock.advance(11)
    shared_b.apply_remote({}, full=False)
    assert b.snapshot()["requests_in_window"] == 0


def test_affordable_changes_nothing_but_counts_a_no_as_a_refusal() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.0, min_per_s=0.1, window_s=10), FakeClock())
    assert budget.affordable() and budget.affordable()  # one retry in the window, not spent
    assert not budget.affordable(scale=0.5)
    assert (budget.spent_total, budget.refused_total) == (0, 1)
    assert budget.try_spend() and not budget.affordable()
    assert (budget.spent_total, budget.refused_total) == (1, 2)

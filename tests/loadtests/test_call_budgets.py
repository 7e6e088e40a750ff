"""The calls-per-request guard: every route shape within 5 % of its committed budget.

Counts, not timings (`loadtests.bench_calls`): the real gateway with its call counter, real
replicas on loopback, each shape's requests one at a time inside a counted window, the idle
rate of the background tasks taken off. A feature that makes every request run more code
fails here; a budget rises only in a commit that says why.
"""

from __future__ import annotations

import pytest

from loadtests.bench_calls import Count, budgets, measure, over_budget

pytestmark = pytest.mark.integration


def test_every_shape_has_a_budget_and_is_within_it() -> None:
    limits = budgets()
    counts = measure()
    assert set(counts) == set(limits)
    assert all(c.calls > 50 for c in counts.values())  # the counter saw the requests
    assert over_budget(counts, limits) == []


def test_a_shape_over_its_budget_or_without_one_is_named() -> None:
    counts = {"plain": Count(320.0, 100.0, []), "grpc": Count(100.0, 40.0, [])}
    over = over_budget(counts, {"plain": 300})  # 320 > 300 + 5 %
    assert over == [
        "plain: 320 calls per request, budget 300 (+5 %)",
        "grpc: 100 calls per request, and no budget",
    ]
    assert over_budget({"plain": Count(314.0, 100.0, [])}, {"plain": 300}) == []

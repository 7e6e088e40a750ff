"""The hedge layer: one more copy after the pool's observed quantile, paid from the budget."""

from __future__ import annotations

import pytest

from gateway.slo.policy import NORMAL, PolicyAdjustment
from tests.gateway.conftest import make_config
from tests.gateway.fakes import hang
from tests.gateway.pipeline.rig import A, Rig, slow

HEDGED = make_config(replicas=2, hedge={"enabled": True, "min_samples": 5, "min_delay_ms": 1})


async def test_hedge_after_p95_takes_the_first_good_answer() -> None:
    rig = Rig(HEDGED, {A: hang()})  # the first copy never answers by itself
    rig.prime(0.005, samples=10)
    rig.replica(1).outstanding = 100  # make P2C pick the hung replica first
    started = rig.clock.now()
    result = await rig.run(timeout_s=10)  # only the hedge can answer
    assert result.served_by == "r1" and rig.pipeline.hedge.hedges_won == 1
    assert rig.clock.now() - started == pytest.approx(0.005)  # sent at the p95, answered at once
    assert rig.budget.spent_total == 1
    # the losing copy is cancelled without delaying the answer: nothing else ends a hung try
    # within the 10 s deadline
    await rig.clock.idle()
    assert rig.replica(0).outstanding == 0 and rig.clock.now() - started == pytest.approx(0.005)


async def test_no_hedge_when_the_first_copy_answers_before_the_delay() -> None:
    rig = Rig(HEDGED)
    rig.transport.behaviours[A] = slow(rig.clock, 0.004)
    rig.prime(0.005, samples=10)
    rig.replica(1).outstanding = 100
    result = await rig.run()
    assert result.served_by == "r0" and rig.pipeline.hedge.hedges_sent == 0
    assert rig.budget.spent_total == 0


async def test_no_hedge_without_budget() -> None:
    budget = {"ratio": 0.0, "min_per_s": 0.0}
    rig = Rig(HEDGED, budget=budget)
    rig.transport.behaviours[A] = slow(rig.clock, 0.05)
    rig.prime(0.005, samples=10)
    rig.replica(1).outstanding = 100
    started = rig.clock.now()
    result = await rig.run()
    assert result.served_by == "r0" and rig.pipeline.hedge.hedges_sent == 0
    assert rig.clock.now() - started == pytest.approx(0.05)  # the first copy, waited for


async def test_a_hedge_is_paid_at_the_burn_policys_scale() -> None:
    """1.5 retries in the budget pay a hedge at full scale, not at half (the burn policy's
    protection of the error budget reaches hedges as it reaches retries)."""
    budget = {"ratio": 0.0, "min_per_s": 0.15}
    half = PolicyAdjustment(retry_budget_factor=0.5)
    for adjust, hedges in ((lambda m: NORMAL, 1), (lambda m: half, 0)):
        rig = Rig(HEDGED, budget=budget, adjust=adjust)
        rig.transport.behaviours[A] = slow(rig.clock, 0.05)
        rig.prime(0.005, samples=10)
        rig.replica(1).outstanding = 100
        await rig.run()
        assert rig.pipeline.hedge.hedges_sent == hedges


async def test_a_hedge_with_no_replica_left_leaves_the_first_copy_to_answer() -> None:
    # a pool of one: the copy finds no replica it has not tried; that is the copy's failure,
    # and the first copy's answer, when it comes, is the request's
    rig = Rig(make_config(replicas=1, hedge={"enabled": True, "min_samples": 5, "min_delay_ms": 1}))
    rig.transport.behaviours[A] = slow(rig.clock, 0.05)
    rig.prime(0.005, samples=10)
    started = rig.clock.now()
    result = await rig.run()
    assert result.served_by == "r0" and rig.pipeline.hedge.hedges_sent == 1
    assert rig.clock.now() - started == pytest.approx(0.05)

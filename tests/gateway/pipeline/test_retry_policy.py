"""`RetryPolicy` on its own: the rules, the order they are checked in, and what they cost."""

from __future__ import annotations

import random

import pytest

from gateway.call import Attempts, Leg
from gateway.errors import UpstreamError, UpstreamStatusError, UpstreamTimeout
from gateway.outcome import Outcome, OutcomeKind
from gateway.retry.policy import MIN_TRY_S, RetryPolicy
from gateway.slo.policy import NORMAL, PolicyAdjustment
from tests.gateway.conftest import make_config
from tests.gateway.pipeline.rig import Rig


def _policy(rig: Rig, scale: float = 1.0) -> RetryPolicy:
    adjustment = PolicyAdjustment(retry_budget_factor=scale) if scale != 1.0 else NORMAL
    return RetryPolicy(rig.budget, lambda m: adjustment, rig.metrics, rig.clock, random.Random(0))


def _after_one_try(rig: Rig, timeout_s: float = 1.0) -> Leg:
    call = rig.call(timeout_s)
    attempts = Attempts(call.ledger, rig.registry.pools["p"])
    attempts.take(rig.replica(0))
    return Leg(call, attempts)


def _failed(kind: OutcomeKind, status: int | None = None) -> UpstreamError:
    outcome = Outcome(kind, "r0", 0.01, status)
    if status is None:
        return UpstreamTimeout("t", outcome=outcome)
    return UpstreamStatusError("s", status, outcome=outcome)


SERVER_ERROR = (OutcomeKind.SERVER_ERROR, 503)


def test_possible_while_attempts_replicas_and_budget_remain() -> None:
    rig = Rig(make_config(retry={"max_attempts": 3}))
    policy, leg = _policy(rig), _after_one_try(rig)
    assert policy.possible(leg)
    leg.attempts.count = 3
    assert not policy.possible(leg)  # the attempt cap
    leg.attempts.count = 2
    leg.attempts.tried |= {"r1", "r2"}
    assert not policy.possible(leg)  # every replica tried
    assert rig.budget.refused_total == 0  # asking changes nothing


def test_possible_reads_the_budget_at_the_burn_policys_scale() -> None:
    rig = Rig(make_config(), budget={"ratio": 0.0, "min_per_s": 0.15})  # 1.5 retries
    assert _policy(rig).possible(_after_one_try(rig))
    assert not _policy(rig, scale=0.5).possible(_after_one_try(rig))


async def test_a_retry_waits_its_backoff_then_is_paid_once() -> None:
    rig = Rig(make_config())
    policy, leg = _policy(rig), _after_one_try(rig)
    started = rig.clock.now()
    assert await policy.next_try(leg, _failed(*SERVER_ERROR))
    [wait] = rig.clock.slept
    assert 0 <= wait <= 0.025 and rig.clock.now() - started == pytest.approx(wait)
    assert rig.budget.spent_total == 1 and rig.retries_recorded() == 1


async def test_after_a_slow_try_the_next_goes_at_once() -> None:
    rig = Rig(make_config())
    policy, leg = _policy(rig), _after_one_try(rig)
    assert await policy.next_try(leg, _failed(OutcomeKind.SLOW))
    assert rig.clock.slept == [] and rig.budget.spent_total == 1


async def test_an_outcome_that_is_not_retryable_ends_the_tries_for_free() -> None:
    rig = Rig(make_config())
    policy, leg = _policy(rig), _after_one_try(rig)
    assert not await policy.next_try(leg, _failed(OutcomeKind.CANCELLED))
    assert rig.budget.spent_total == 0 and rig.budget.refused_total == 0


async def test_no_retry_that_would_start_less_than_min_try_before_the_deadline() -> None:
    rig = Rig(make_config())
    policy, leg = _policy(rig), _after_one_try(rig, timeout_s=MIN_TRY_S * 0.99)
    assert not await policy.next_try(leg, _failed(OutcomeKind.SLOW))
    assert rig.budget.spent_total == 0 and rig.budget.refused_total == 0
    assert rig.refusals_recorded() == 0  # the deadline stopped it, not the budget


async def test_an_empty_budget_refuses_before_any_backoff() -> None:
    rig = Rig(make_config(), budget={"ratio": 0.0, "min_per_s": 0.0})
    policy, leg = _policy(rig), _after_one_try(rig)
    assert not await policy.next_try(leg, _failed(*SERVER_ERROR))
    assert rig.clock.slept == [] and rig.budget.spent_total == 0
    assert rig.budget.refused_total == 1 and rig.refusals_recorded() == 1


async def test_nothing_is_paid_when_no_untried_replica_admits_traffic_after_the_wait() -> None:
    rig = Rig(make_config())
    policy, leg = _policy(rig), _after_one_try(rig)
    rig.trip(1)
    rig.trip(2)
    assert not await policy.next_try(leg, _failed(*SERVER_ERROR))
    assert rig.budget.spent_total == 0 and rig.budget.refused_total == 0

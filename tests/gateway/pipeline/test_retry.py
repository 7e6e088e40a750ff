"""The retry layer and its policy: where retries go, when, and exactly what they cost."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import (
    DeadlineExceeded,
    NoReplicaAvailable,
    RejectedByReplicas,
    UpstreamConnectError,
    UpstreamFailed,
)
from gateway.outcome import OutcomeKind
from gateway.retry.policy import MIN_TRY_S
from gateway.slo.policy import PolicyAdjustment
from tests.gateway.conftest import make_config
from tests.gateway.fakes import Behaviour, fail, hang, reply
from tests.gateway.pipeline.rig import OK, A, B, C, Rig, slow
from tests.support.virtual_time import VirtualClock

FAILING = {k: reply(503) for k in (A, B, C)}


async def test_a_failing_replica_is_retried_elsewhere() -> None:
    rig = Rig(make_config(), {A: reply(503), B: reply(503)})
    for _ in range(20):
        result = await rig.run()
        assert result.status == 200 and result.served_by == "r2"
    assert max(len(rig.transport.calls[k]) for k in (A, B)) <= 20


async def test_retries_never_repeat_a_replica_and_stop_at_max_attempts() -> None:
    behaviours = {f"127.0.0.1:{9000 + i}": fail(UpstreamConnectError("refused")) for i in range(5)}
    rig = Rig(make_config(replicas=5, retry={"max_attempts": 3}), behaviours)
    call = rig.call()
    with pytest.raises(UpstreamFailed, match="after 3 attempt"):
        await rig.pipeline.handler(call)
    assert (
        call.attempts == 3 == len({o.replica for o in call.ledger.outcomes}) == rig.transport.sent()
    )


async def test_backoff_waits_on_the_clock_with_full_jitter_under_its_ceiling() -> None:
    rig = Rig(make_config(), {k: reply(503) for k in (A, B, C)})
    started = rig.clock.now()
    with pytest.raises(UpstreamFailed):
        await rig.run()
    first, second = rig.clock.slept
    assert 0 <= first <= 0.025 and 0 <= second <= 0.05  # base 25 ms, doubling
    assert rig.clock.now() - started == pytest.approx(first + second)  # the answers take no time


async def test_the_copy_after_a_slow_try_goes_at_once_without_backoff() -> None:
    rig = Rig(make_config(replicas=2), {A: hang()})
    rig.prime()
    rig.replica(1).outstanding = 50  # P2C tries the hung replica first
    started = rig.clock.now()
    result = await rig.run(timeout_s=5.0)
    assert result.served_by == "r1" and result.attempts == 2
    assert rig.clock.slept == []
    min_try_s = rig.config.models["digits"].retry.try_timeout.min_ms / 1000
    assert rig.clock.now() - started == pytest.approx(min_try_s)  # the short try, then at once
    await rig.pipeline.attempt.aclose()  # the hung try would wait out the deadline


async def test_no_replica_left_to_try_reports_how_the_last_try_failed() -> None:
    rig = Rig(make_config(), {A: reply(503, b'{"error":"overloaded"}')})
    for index in (1, 2):
        rig.trip(index)
    with pytest.raises(UpstreamFailed, match=r"after 1 attempt.*r0 answered 503: unavailable$"):
        await rig.run()
    assert rig.budget.spent_total == 0 and rig.retries_recorded() == 0


async def test_a_client_error_is_not_retried_once_two_replicas_agree() -> None:
    rig = Rig(make_config(), {k: reply(400, b'{"error":"x"}') for k in (A, B, C)})
    call = rig.call()
    with pytest.raises(RejectedByReplicas):
        await rig.pipeline.handler(call)
    assert call.attempts == 2 and rig.budget.spent_total == 1


async def test_retry_budget_bounds_amplification_when_all_fail() -> None:
    budget = {"ratio": 0.2, "min_per_s": 1, "window_s": 10}
    rig = Rig(make_config(retry={"max_attempts": 3}), FAILING, budget=budget)
    failed = 0
    for _ in range(200):
        try:
            await rig.run()
        except (UpstreamFailed, NoReplicaAvailable):
            failed += 1
    assert failed == 200
    assert rig.transport.sent() <= 1.2 * 200 + 10


async def test_the_burn_policy_scales_the_budget_for_retries_and_per_try_timeouts() -> None:
    """The budget has one retry at full scale and none at half: while the burn policy halves
    it, a failure is not retried, and a hung first try is not cut short (nothing could follow)."""
    budget = {"ratio": 0.0, "min_per_s": 0.15, "window_s": 10}  # 1.5 retries in the window
    halved = PolicyAdjustment(retry_budget_factor=0.5, reason="fast burn")
    rig = Rig(make_config(replicas=2), {A: reply(503)}, budget=budget, adjust=lambda m: halved)
    rig.replica(1).outstanding = 50  # P2C tries r0 first
    with pytest.raises(UpstreamFailed):
        await rig.run()
    assert rig.transport.sent() == 1 and rig.refusals_recorded() == 1

    rig = Rig(make_config(replicas=2), {A: hang()}, budget=budget, adjust=lambda m: halved)
    rig.prime()
    rig.replica(1).outstanding = 50
    call = rig.call(timeout_s=0.5)
    with pytest.raises(DeadlineExceeded):
        await rig.pipeline.handler(call)
    assert [o.kind for o in call.ledger.outcomes] == [OutcomeKind.CANCELLED]  # waited, not SLOW


# --- exact accounting: N tries cost N − 1 retries, however they end ---------------------------


async def _tries_and_costs(rig: Rig, timeout_s: float = 1.0) -> tuple[int, int, float]:
    """One request: (tries sent, retries spent, retries recorded in metrics)."""
    sent, spent, recorded = rig.transport.sent(), rig.budget.spent_total, rig.retries_recorded()
    call = rig.call(timeout_s)
    with contextlib.suppress(Exception):  # every way of ending is under test here
        await rig.pipeline.handler(call)
    await rig.pipeline.attempt.aclose()
    tries = rig.transport.sent() - sent
    assert tries == call.attempts
    return tries, rig.budget.spent_total - spent, rig.retries_recorded() - recorded


async def test_exhausted_attempts_spend_one_retry_per_retry_sent() -> None:
    rig = Rig(make_config(retry={"max_attempts": 3}), FAILING)
    assert await _tries_and_costs(rig) == (3, 2, 2)
    assert rig.budget.refused_total == 0


async def test_exhausted_replicas_spend_one_retry_per_retry_sent() -> None:
    rig = Rig(make_config(retry={"max_attempts": 5}), FAILING)
    assert await _tries_and_costs(rig) == (3, 2, 2)


async def test_a_refusing_budget_spends_nothing_more() -> None:
    budget = {"ratio": 0.0, "min_per_s": 0.1, "window_s": 10}  # one retry in the window
    rig = Rig(make_config(retry={"max_attempts": 3}), FAILING, budget=budget)
    assert await _tries_and_costs(rig) == (2, 1, 1)
    assert rig.budget.refused_total == 1 and rig.refusals_recorded() == 1
    assert await _tries_and_costs(rig) == (1, 0, 0)  # the window's retry is gone


async def test_the_deadline_stops_retries_without_spending() -> None:
    """Each try fails after 48 ms; no backoff: after the second, 4 ms are left (< 5 ms)."""
    rig = Rig(make_config(retry={"max_attempts": 3, "backoff_base_ms": 0}))
    for authority in (A, B, C):
        rig.transport.behaviours[authority] = slow(rig.clock, 0.048, reply(503))
    assert MIN_TRY_S > 0.1 - 2 * 0.048
    assert await _tries_and_costs(rig, timeout_s=0.1) == (2, 1, 1)


async def test_no_admissible_replica_left_spends_nothing() -> None:
    rig = Rig(make_config(), FAILING)
    for index in (1, 2):
        rig.trip(index)
    assert await _tries_and_costs(rig) == (1, 0, 0)


async def test_an_answer_after_retries_spent_one_per_retry() -> None:
    rig = Rig(make_config(), {A: reply(503), B: reply(500)})
    rig.replica(2).outstanding = 50  # tried last
    assert await _tries_and_costs(rig) == (3, 2, 2)


BEHAVIOURS: dict[str, Callable[[VirtualClock], Behaviour]] = {
    "answers": lambda clock: reply(200, OK),
    "503": lambda clock: reply(503),
    "500": lambda clock: reply(500, b'{"error":"boom"}'),
    "400": lambda clock: reply(400, b'{"error":"no"}'),
    "garbage": lambda clock: reply(200, b"not json"),
    "refuses": lambda clock: fail(UpstreamConnectError("refused")),
    "slow": lambda clock: slow(clock, 0.03),
    "slow 503": lambda clock: slow(clock, 0.03, reply(503)),
    "hangs": lambda clock: hang(),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(sorted(BEHAVIOURS)), min_size=1, max_size=4),
    max_attempts=st.integers(1, 5),
    budget_retries=st.sampled_from([0, 1, 2, 100]),
    timeout_ms=st.integers(2, 300),
    backoff_ms=st.sampled_from([0.0, 25.0]),
    primed=st.booleans(),
    seed=st.integers(0, 3),
)
async def test_n_tries_always_cost_n_minus_one_retries(
    kinds: list[str],
    max_attempts: int,
    budget_retries: int,
    timeout_ms: int,
    backoff_ms: float,
    primed: bool,
    seed: int,
) -> None:
    """Whatever the replicas do and whatever ends the tries (an answer, the attempt cap, no
    replica left, the budget, the deadline), each request's N tries spend N − 1 retries and
    record N − 1 in `gateway_retries_total`. Several requests share breakers and the budget."""
    retry = {"max_attempts": max_attempts, "backoff_base_ms": backoff_ms}
    budget = {"ratio": 0.0, "min_per_s": budget_retries / 10, "window_s": 10}
    rig = Rig(make_config(replicas=len(kinds), retry=retry), budget=budget, seed=seed)
    for index, kind in enumerate(kinds):
        rig.transport.behaviours[f"127.0.0.1:{9000 + index}"] = BEHAVIOURS[kind](rig.clock)
    if primed:
        rig.prime(0.005)  # learned per-try timeouts: slow tries race their retries
    for _ in range(3):
        tries, spent, recorded = await _tries_and_costs(rig, timeout_ms / 1000)
        assert spent == recorded == max(0, tries - 1)

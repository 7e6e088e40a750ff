"""Retry layer: bounded, jittered, deadline-aware retries with tenacity, under the budget.

Policy, each piece a tenacity primitive or a small callable beside them:
- stop: ``stop_after_attempt`` | `StopBeforeDeadline` (never start a backoff that would leave
  the next try less than a minimum slice before the deadline);
- wait: `FullJitter`, exponential backoff with full jitter (base 25 ms, cap 250 ms by default),
  except after a slow try, which is still running: the next copy goes at once, as a hedge;
- retry: only retryable outcomes (connect error, timeout, protocol error, 5xx), and a 4xx for
  a second opinion (`gateway.upstream.evidence`: the same refusal from two replicas is the
  request's fault and ends the tries; an answer elsewhere charges the refusing replica), only
  while the gateway-wide `RetryBudget` has a retry to spend;
- each retry lands on a replica this request has not tried (the balance layer skips tried ones).

The first attempt runs *outside* tenacity: measured here, an ``AsyncRetrying`` loop costs
≈ 27 µs CPU per request even when the first try succeeds, more than a tenth of the gateway's
whole per-request budget; most requests never retry, so they should not pay for it.
"""

from __future__ import annotations

import random

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.stop import stop_base

from gateway.clock import Clock
from gateway.deadline import Deadline
from gateway.errors import NoReplicaAvailable, UpstreamError
from gateway.pipeline.call import Adjuster, Handler, InferCall, InferResult
from gateway.pipeline.pending import PendingAnswers
from gateway.policies.backoff import FullJitter
from gateway.policies.budget import RetryBudget
from gateway.policies.classify import OutcomeKind
from gateway.telemetry.metrics import Metrics
from gateway.upstream import evidence

MIN_TRY_S = 0.005  # a retry needs at least this much time left after its backoff


class StopBeforeDeadline(stop_base):
    """Stops when the upcoming backoff would leave less than ``min_try_s`` before the deadline."""

    def __init__(self, deadline: Deadline, min_try_s: float = MIN_TRY_S) -> None:
        self._deadline = deadline
        self._min_try_s = min_try_s

    def __call__(self, retry_state: RetryCallState) -> bool:
        return bool(self._deadline.remaining() - retry_state.upcoming_sleep < self._min_try_s)


class RetryLayer:
    def __init__(
        self,
        budget: RetryBudget,
        clock: Clock,
        rng: random.Random,
        metrics: Metrics,
        adjust: Adjuster,
        inner: Handler,
    ) -> None:
        self._metrics = metrics
        self._adjust = adjust
        self._budget = budget
        self._clock = clock
        self._rng = rng
        self._inner = inner

    async def __call__(self, call: InferCall) -> InferResult:
        self._budget.record_request()
        try:
            return await self._inner(call)
        except UpstreamError as first:
            result = await self._after_first(call, first)
        if call.disputes:
            evidence.refuted(call.disputes, result.served_by)
        return result

    async def _after_first(self, call: InferCall, first: UpstreamError) -> InferResult:
        policy = call.model.retry
        pending = PendingAnswers()
        pending.keep(first)
        if policy.max_attempts < 2 or not _retryable(first):
            return await self._settle(call, pending, first)
        jitter = FullJitter(policy.backoff_base_ms / 1000, policy.backoff_max_ms / 1000, self._rng)
        wait = 0.0 if _slow(first) else jitter.for_retry(0)
        if call.deadline.remaining() - wait < MIN_TRY_S or not self._spend(call):
            return await self._settle(call, pending, first)
        await self._clock.sleep(wait)
        try:
            return await self._retry(call, first, jitter, pending)
        except UpstreamError as last:
            return await self._settle(call, pending, last)

    async def _settle(
        self, call: InferCall, pending: PendingAnswers, error: UpstreamError
    ) -> InferResult:
        """No more tries: a slow exchange that still answers well wins, else the error stands;
        disputes nobody settled are decided without a second opinion."""
        result = await pending.first_good()
        if result is not None:
            return result
        rejected, call.disputes = evidence.unresolved(call.disputes, call.model_name)
        if rejected is not None:
            raise rejected from error
        raise error

    def _spend(self, call: InferCall) -> bool:
        if self._budget.try_spend(self._adjust(call.model_name).retry_budget_factor):
            self._metrics.retry(call.model_name)
            return True
        self._metrics.retry_refused(call.model_name)
        return False

    async def _retry(
        self, call: InferCall, first: UpstreamError, jitter: FullJitter, pending: PendingAnswers
    ) -> InferResult:
        last = [first]
        exhausted = False

        async def attempt() -> InferResult:
            nonlocal exhausted
            try:
                return await pending.race(self._inner(call))
            except UpstreamError as exc:
                pending.keep(exc)
                last.append(exc)
                rejected = evidence.request_at_fault(call.disputes, call.model_name)
                if rejected is not None:  # two replicas refused it alike: nobody is charged
                    call.disputes.clear()
                    raise rejected from exc
                raise
            except NoReplicaAvailable:  # every replica tried: report how the last try failed
                exhausted = True
                raise last[-1] from None

        retrying = AsyncRetrying(
            stop=stop_after_attempt(call.model.retry.max_attempts - 1)
            | StopBeforeDeadline(call.deadline),
            wait=lambda state: 0.0 if _slow(_error_of(state)) else jitter(state),
            retry=retry_if_exception(
                lambda exc: not exhausted and _retryable(exc) and self._spend(call)
            ),
            sleep=self._clock.sleep,
            reraise=True,
        )
        result: InferResult = await retrying(attempt)
        return result


def _slow(error: BaseException | None) -> bool:
    """A slow try is still running elsewhere: the next copy goes at once, as a hedge would."""
    return (
        isinstance(error, UpstreamError)
        and error.outcome is not None
        and error.outcome.kind is OutcomeKind.SLOW
    )


def _error_of(state: RetryCallState) -> BaseException | None:
    return state.outcome.exception() if state.outcome is not None else None


def _retryable(error: BaseException) -> bool:
    return (
        isinstance(error, UpstreamError) and error.outcome is not None and error.outcome.retryable
    )

"""The retry policy in one place: whether another try may follow, after what wait, at what price.

The retry layer's loop, the attempt layer's per-try timeout ("is a retry still possible?") and
the hedge layer ("may a second copy go?") ask this one object, so they cannot disagree.
Another try follows only
- a retryable outcome: connect error, timeout, slow, protocol error, 5xx, or a 4xx, which
  the fault judge disputes until another replica's answer settles it (`gateway.faults.judge`);
- within ``max_attempts`` tries in all, while a replica this request has not tried is left and
  admits traffic (the balance layer's eligibility: health, ejection, breaker);
- after `FullJitter` backoff (exponential, full jitter), except after a SLOW try, which is still
  running: the next copy goes at once, as a hedge would; and only if that wait leaves at least
  `MIN_TRY_S` before the deadline (stop *before* it, never at it);
- while the gateway-wide `RetryBudget`, scaled by the burn policy (`Adjuster`), has a retry.

Accounting is exact: the budget is asked last, after the backoff, so one retry is spent and
`metrics.retry` recorded per retry actually sent, and N tries cost N−1 retries however they end
(an answer, the attempt cap, a refusal by the budget, the deadline). The one exception is a race
inside the balance layer: a half-open breaker handing out its last probe permit to another
request at that very instant. tenacity's ``AsyncRetrying`` evaluated its ``retry`` predicate
(which spent the budget) before its ``stop``, so the last try spent a retry that was never sent;
here the loop is plain and the decisions are small checks. The backoff is tenacity's: each
model's `FullJitter` wait, driven by a `RetryCallState` whose ``attempt_number`` is the tries
the leg made.
"""

from __future__ import annotations

import random

from tenacity import RetryCallState, Retrying

from gateway.call import Adjuster, Leg
from gateway.clock import Clock
from gateway.errors import UpstreamError
from gateway.outcome import OutcomeKind
from gateway.retry.backoff import FullJitter
from gateway.retry.budget import RetryBudget
from gateway.telemetry.metrics import RequestMetrics
from gateway.upstream.eligibility import eligible

# a retry needs at least this much time left after its backoff
MIN_TRY_S = 0.005


class RetryPolicy:
    def __init__(
        self,
        budget: RetryBudget,
        adjust: Adjuster,
        metrics: RequestMetrics,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self._budget = budget
        self._adjust = adjust
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        # by (base ms, max ms)
        self._backoffs: dict[tuple[float, float], Retrying] = {}

    def count_request(self) -> None:
        """A client request reached its route: it adds to what the budget allows, once
        however many legs (a vote's) or sends it takes."""
        self._budget.record_request()

    def possible(self, leg: Leg) -> bool:
        """Whether a retry could still follow the current try (it changes nothing)."""
        return self._tries_left(leg) and self._budget.balance(self._scale(leg)) >= 1.0

    def pay_hedge(self, leg: Leg) -> bool:
        """Spends one retry on a hedge (a second copy of a try still running); False: refused.
        Hedges and retries share the budget at the burn policy's scale, so a slow pool cannot
        double its own load either way."""
        if self._budget.try_spend(self._scale(leg)):
            return True
        self._metrics.retry_refused(leg.call.model_name)
        return False

    async def next_try(self, leg: Leg, error: UpstreamError) -> bool:
        """Waits out the backoff before the next try and pays for it: True when the next try
        may go now (one retry spent and recorded); False when no try may follow."""
        wait = self._wait(leg, error)
        if wait is None:
            return False
        if wait > 0.0:
            await self._clock.sleep(wait)
        return self.pay(leg)

    def _wait(self, leg: Leg, error: UpstreamError) -> float | None:
        """The wait before the next try; None when none may follow (nothing spent)."""
        outcome = error.outcome
        if outcome is None or not outcome.retryable or not self._tries_left(leg):
            return None
        wait = 0.0 if outcome.kind is OutcomeKind.SLOW else self._backoff(leg)
        if leg.call.deadline.remaining() - wait < MIN_TRY_S:
            return None
        if not self._budget.affordable(self._scale(leg)):
            # don't wait for a certain no
            self._metrics.retry_refused(leg.call.model_name)
            return None
        return wait

    def pay(self, leg: Leg) -> bool:
        """Right before a send beyond the leg's first (a retry after its wait; a vote's
        tie-break): an admissible replica is left and the budget still pays (others may have
        spent it meanwhile). True: one retry spent and recorded."""
        if not eligible(leg.pool, leg.attempts.tried, self._clock.now()):
            # the untried replicas are down, ejected or tripped
            return False
        if not self._budget.try_spend(self._scale(leg)):
            self._metrics.retry_refused(leg.call.model_name)
            return False
        self._metrics.retry(leg.call.model_name)
        return True

    def _tries_left(self, leg: Leg) -> bool:
        attempts = leg.attempts
        # the replicas first: no config read (a pydantic model's ``__getattr__`` hook) where
        # every one was tried, as in a pool of one
        return len(attempts.tried) < len(attempts.pool.replicas) and (
            attempts.count < leg.call.model.retry.max_attempts
        )

    def _scale(self, leg: Leg) -> float:
        return self._adjust(leg.call.model_name).retry_budget_factor

    def _backoff(self, leg: Leg) -> float:
        """The model's full-jitter wait after the leg's tries so far: a retry only, never a
        first try (the `Retrying` and its wait are made once per backoff setting)."""
        policy = leg.call.model.retry
        key = (policy.backoff_base_ms, policy.backoff_max_ms)
        retrying = self._backoffs.get(key)
        if retrying is None:
            jitter = FullJitter(key[0] / 1000, key[1] / 1000, self._rng)
            retrying = self._backoffs[key] = Retrying(wait=jitter)
        state = RetryCallState(retrying, None, (), {})
        state.attempt_number = max(1, leg.attempts.count)
        return retrying.wait(state)

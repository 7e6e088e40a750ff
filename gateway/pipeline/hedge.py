"""Hedge layer: after the pool's observed p95, send one more copy to another replica.

"The Tail at Scale": a request still unanswered when most requests would have finished is
probably stuck behind a slow replica; a second copy elsewhere cuts the tail for a few percent
more load. The first good answer wins and the other copy is cancelled (both are, and waited
for, when the request itself is cancelled: `gateway.cancel`). Hedges are paid through
the `RetryPolicy` (the retry budget at the burn policy's scale), so a slow pool cannot double
its own load. Off unless the model enables it.
"""

from __future__ import annotations

import asyncio

from gateway.call import Adjuster, InferAnswer, Leg, LegHandler
from gateway.cancel import cancel_all
from gateway.clock import Clock, wait_first
from gateway.retry.policy import RetryPolicy
from gateway.telemetry.metrics import RequestMetrics


class HedgeLayer:
    def __init__(
        self,
        retry: RetryPolicy,
        clock: Clock,
        metrics: RequestMetrics,
        adjust: Adjuster,
        inner: LegHandler,
    ) -> None:
        self._metrics = metrics
        self._adjust = adjust
        self._retry = retry
        self._clock = clock
        self._inner = inner
        self.hedges_sent = 0
        self.hedges_won = 0

    def _delay(self, leg: Leg) -> float | None:
        call, pool = leg.call, leg.pool
        policy = call.model.hedge
        if not policy.enabled or pool.latency.count < policy.min_samples:
            return None
        if not self._adjust(call.model_name).hedging_enabled:
            # the burn policy protects the error budget
            return None
        observed = pool.latency.quantile(policy.quantile)
        if observed is None:
            return None
        delay = max(policy.min_delay_ms / 1000, observed)
        return delay if delay < call.deadline.remaining() else None

    async def __call__(self, leg: Leg) -> InferAnswer:
        delay = self._delay(leg)
        if delay is None:
            return await self._inner(leg)
        primary = asyncio.ensure_future(self._inner(leg))
        tasks = {primary}
        try:
            await wait_first(self._clock, tasks, self._clock.now() + delay)
            if primary.done() or not self._retry.pay_hedge(leg):
                return await primary
            self.hedges_sent += 1
            hedge = asyncio.ensure_future(self._second(leg))
            tasks.add(hedge)
            won_before = self.hedges_won
            result = await self._first_good(primary, hedge)
            self._metrics.hedge(leg.call.model_name, won=self.hedges_won > won_before)
            return result
        except asyncio.CancelledError:
            await cancel_all(tasks)
            raise
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()

    async def _second(self, leg: Leg) -> InferAnswer:
        """The hedge's copy: a refusal to start one (no other replica) is the copy's failure,
        as the primary's answer may still be good."""
        return await self._inner(leg)

    async def _first_good(
        self, primary: asyncio.Future[InferAnswer], hedge: asyncio.Future[InferAnswer]
    ) -> InferAnswer:
        pending: set[asyncio.Future[InferAnswer]] = {primary, hedge}
        errors: dict[asyncio.Future[InferAnswer], BaseException] = {}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if error is None:
                    if task is hedge:
                        self.hedges_won += 1
                    return task.result()
                errors[task] = error
        # both failed: the primary's story
        raise errors.get(primary) or errors[hedge]

"""Rollout route: the model's pool and a candidate pool, as a shadow or a canary.

For each request the rollout (`gateway.rollout.Rollouts.plan`) says which pool serves it (the
candidate for a canary's share, all of them once promoted) and whether a copy goes to the
other pool to be compared. The serving leg is a full single route (retry, hedge, balance,
attempt). A candidate that fails a request counts against it, and the request is served by the
model's pool in the time left, so a bad canary costs its clients no errors.

A copy is a background task started once the client's answer is known: the client never
waits for it and its answer never changes the client's. It is bounded (the rollout's
`gateway.policies.copy_gate.CopyGate`: concurrency and rate) and shed first: not sent while
the model's admission is over `SHED_LOAD` of its bound, nor while the gateway's event loop
lags past the rollout's ``shed_loop_lag_ms`` (`gateway.rollout.lag`). It runs with its own
deadline, one attempt and no hedge, so it spends nothing from the retry budget, and it never
reaches the edge's observer: the model's SLOs, statistics and tenant limits see only clients'
requests. Its answer is compared with the client's as the vote compares
(`gateway.rollout.compare`), both in the client's names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from gateway.call import Attempts, InferAnswer, InferCall, Ledger, Leg, LegHandler, speak
from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.config.policies import HedgeConfig, RetryConfig, TryTimeoutConfig
from gateway.deadline import Deadline
from gateway.errors import BadRequest, GatewayError
from gateway.rollout.compare import compare
from gateway.rollout.controller import Rollouts
from gateway.upstream.registry import Pool, Registry
from gateway.v2.codec import decode_outputs

log = logging.getLogger(__name__)
# the model's in-flight share of its bound above which copies are not sent
SHED_LOAD = 0.75
ONE_TRY = RetryConfig(max_attempts=1, try_timeout=TryTimeoutConfig(adaptive=False))


class RolloutRoute:
    def __init__(
        self,
        registry: Registry,
        leg: LegHandler,
        rollouts: Rollouts,
        clock: Clock,
        load: Callable[[str], float],
    ) -> None:
        """``load``: the model's requests in flight over its admission bound (0..1)."""
        self._registry = registry
        self._leg = leg
        self._rollouts = rollouts
        self._clock = clock
        self._load = load
        self._copies: set[asyncio.Task[None]] = set()
        self._copy_models: dict[int, ModelConfig] = {}

    async def __call__(self, call: InferCall) -> InferAnswer:
        model = call.model
        assert model.rollout is not None and model.pool is not None, "the router checks"
        name = call.model_name
        plan = self._rollouts.plan(name)
        current = self._registry.pools[model.pool]
        candidate = self._registry.pools[model.rollout.candidate]
        serving, other = (candidate, current) if plan.candidate else (current, candidate)
        started = self._clock.now()
        try:
            result = await self._leg(Leg(speak(call, serving), Attempts(call.ledger, serving)))
        except GatewayError:
            self._rollouts.served(name, plan.candidate, False, self._clock.now() - started)
            if not plan.candidate:
                raise
            return await self._leg(Leg(speak(call, current), Attempts(call.ledger, current)))
        ok = result.status < 500
        self._rollouts.served(name, plan.candidate, ok, self._clock.now() - started)
        if plan.candidate and not ok:
            return await self._leg(Leg(speak(call, current), Attempts(call.ledger, current)))
        if plan.compare and result.status == 200:
            self._copy(call, result, other)
        return result

    def _copy(self, call: InferCall, answer: InferAnswer, pool: Pool) -> None:
        name = call.model_name
        gate = self._rollouts.gate(name)
        if self._load(name) > SHED_LOAD or self._rollouts.busy(name) or gate.admit() is not None:
            self._rollouts.shed(name)
            return
        task = asyncio.create_task(self._compare(call, answer, pool))
        self._copies.add(task)

        def done(task: asyncio.Task[None]) -> None:
            # even when cancelled before it ran
            self._copies.discard(task)
            gate.release()

        task.add_done_callback(done)

    async def _compare(self, call: InferCall, answer: InferAnswer, pool: Pool) -> None:
        name = call.model_name
        try:
            copy = self._copy_call(call)
            started = self._clock.now()
            try:
                other = await self._leg(Leg(speak(copy, pool), Attempts(copy.ledger, pool)))
            except GatewayError:
                self._rollouts.copy_failed(name)
                return
            took = self._clock.now() - started
            if other.status != 200:
                self._rollouts.copy_failed(name)
                return
            try:
                mine = decode_outputs(answer.body, answer.header_length)
                theirs = decode_outputs(other.body, other.header_length)
            except BadRequest:
                self._rollouts.copy_failed(name)
                return
            agreed, differing = compare(mine, theirs, self._rollouts.runs[name].rule)
            self._rollouts.compared(name, agreed, differing, took)
        except Exception:
            # a copy must never take anything else down
            log.exception("shadow copy of a %s request failed", name)

    def _copy_call(self, call: InferCall) -> InferCall:
        """The client's request for the other pool: its own deadline and ledger, one try, no
        hedge (nothing from the retry budget), no trace span and no room in the client's
        in-flight bytes (not the client's work)."""
        model = call.model
        copy_model = self._copy_models.get(id(model))
        if copy_model is None:
            copy_model = model.model_copy(update={"retry": ONE_TRY, "hedge": HedgeConfig()})
            self._copy_models[id(model)] = copy_model
        assert model.rollout is not None
        deadline = Deadline.after(self._clock, model.rollout.shadow_timeout_ms / 1000)
        return dataclasses.replace(
            call, model=copy_model, deadline=deadline, span=None, ledger=Ledger(), room=None
        )

    async def aclose(self) -> None:
        """Cancels the copies still in flight (the gateway stops)."""
        for task in list(self._copies):
            task.cancel()
        await asyncio.gather(*self._copies, return_exceptions=True)

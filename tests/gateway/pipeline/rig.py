"""A pipeline on a scripted transport and a virtual clock, for the per-layer tests.

`ClockedTransport` is the shared `FakeTransport` with its timeout on the rig's clock, as a real
transport's is on real time; behaviours that take time (`slow`) sleep on that clock too.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from gateway.call import Adjuster, InferAnswer, InferCall
from gateway.config import GatewayConfig
from gateway.config.policies import RetryBudgetConfig
from gateway.deadline import Deadline
from gateway.pipeline.build import Pipeline, build_pipeline
from gateway.pipeline.fallback import FallbackRunner
from gateway.retry.budget import RetryBudget
from gateway.telemetry.metrics import Metrics
from gateway.upstream.breaker import OPEN
from gateway.upstream.registry import Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Reply
from gateway.v2.body import Body
from gateway.v2.request import InferRequestInfo
from tests.gateway.fakes import Behaviour, FakeTransport, reply
from tests.support.virtual_time import VirtualClock

A, B, C = "127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"
OK = b'{"outputs":[]}'


class ClockedTransport(FakeTransport):
    def __init__(self, clock: VirtualClock, behaviours: Mapping[str, Behaviour] | None) -> None:
        super().__init__(behaviours, clock=clock)

    def sent(self) -> int:
        return sum(len(calls) for calls in self.calls.values())


def slow(clock: VirtualClock, seconds: float, answer: Behaviour | None = None) -> Behaviour:
    """Answers (as ``answer``, default 200) after ``seconds`` on the clock."""
    then = answer or reply(200, OK)

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        await clock.sleep(seconds)
        return await then(method, path, payload)

    return behave


class Rig:
    def __init__(
        self,
        config: GatewayConfig,
        behaviours: Mapping[str, Behaviour] | None = None,
        *,
        budget: Mapping[str, Any] | None = None,
        fallbacks: Mapping[str, FallbackRunner] | None = None,
        adjust: Adjuster | None = None,
        seed: int = 0,
        clock: VirtualClock | None = None,
    ) -> None:
        self.clock = clock or VirtualClock()
        self.config = config
        self.registry = Registry(config, self.clock)
        self.transport = ClockedTransport(self.clock, behaviours)
        self.budget = RetryBudget(RetryBudgetConfig(**(budget or {})), self.clock)
        self.metrics = Metrics(process=False)
        self.pipeline: Pipeline = build_pipeline(
            self.registry,
            self.transport,
            self.budget,
            self.clock,
            random.Random(seed),
            fallbacks,
            self.metrics,
            adjust,
            models=config.models,  # each model's own path
        )

    def call(
        self,
        timeout_s: float = 1.0,
        *,
        model: str = "digits",
        body: bytes = b"{}",
        request: InferRequestInfo | None = None,
    ) -> InferCall:
        return InferCall(
            model_name=model,
            model=self.config.models[model],
            body=Body.of(body),
            upstream_headers={},
            deadline=Deadline.after(self.clock, timeout_s),
            request_id="t",
            request=request,
        )

    async def run(self, timeout_s: float = 1.0) -> InferAnswer:
        return await self.pipeline.handler(self.call(timeout_s))

    def replica(self, index: int, pool: str = "p") -> Replica:
        return self.registry.pools[pool].replicas[index]

    def trip(self, index: int, pool: str = "p") -> None:
        """Opens the replica's breaker: it takes no traffic until its reset timeout."""
        breaker = self.replica(index, pool).breaker
        assert breaker is not None
        breaker.force(OPEN)

    def prime(self, latency_s: float = 0.002, samples: int = 50, pool: str = "p") -> None:
        """Fills the pool's latency window, as that many answers would (per-try timeout, hedge)."""
        for _ in range(samples):
            self.registry.pools[pool].latency.record(latency_s)

    def retries_recorded(self, model: str = "digits") -> float:
        return self.metrics.catalog.retries.labels(model).value

    def refusals_recorded(self, model: str = "digits") -> float:
        return self.metrics.catalog.retries_refused.labels(model).value

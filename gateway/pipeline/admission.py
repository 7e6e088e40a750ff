"""Admission layer: a bounded number of in-flight requests per model, shed at once beyond it.

Shedding early with 503 + ``Retry-After`` keeps latency bounded for the admitted requests;
queueing without bound would turn overload into timeouts for everyone. The count is taken
before the deadline starts to matter and released however the request ends.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from gateway.errors import Overloaded
from gateway.pipeline.call import Handler, InferCall, InferResult
from gateway.telemetry.metrics import Metrics


class AdmissionLayer:
    def __init__(self, metrics: Metrics, inner: Handler) -> None:
        self._metrics = metrics
        self._inner = inner
        self.in_flight: dict[str, int] = defaultdict(int)
        self.shed: dict[str, int] = defaultdict(int)
        self._total = 0
        self.idle = asyncio.Event()  # set while nothing is in flight (for draining)
        self.idle.set()

    async def __call__(self, call: InferCall) -> InferResult:
        name, policy = call.model_name, call.model.admission
        if self.in_flight[name] >= policy.max_in_flight:
            self.shed[name] += 1
            self._metrics.shed(name)
            raise Overloaded(
                f"model {name!r} is at its bound of {policy.max_in_flight} in-flight requests",
                retry_after_s=policy.retry_after_s,
            )
        self.in_flight[name] += 1
        self._total += 1
        if self._total == 1:
            self.idle.clear()
        try:
            return await self._inner(call)
        finally:
            self.in_flight[name] -= 1
            self._total -= 1
            if self._total == 0:
                self.idle.set()

"""Admission layer: a bounded number of in-flight requests per model, shared fairly by tenants.

Shedding early with ``Retry-After`` keeps latency bounded for the admitted requests; queueing
without bound would turn overload into timeouts for everyone. Each model's bound is split
among the tenants by weight (`gateway.admission.fair_share`): the tenant over its share gets
429, and 503 means the model itself is full. The count is taken before the deadline starts
to matter and released however the request ends: for a request cancelled (its client left),
once the tries it left running in the background have stopped too (`gateway.cancel`).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

from gateway.admission.fair_share import FairShare, model_weights
from gateway.call import Handler, InferAnswer, InferCall
from gateway.config.models import ModelConfig
from gateway.config.tenants import TenantConfig
from gateway.errors import Overloaded, TooManyRequests
from gateway.telemetry.metrics import RequestMetrics

# the shed metric's reason for a tenant over its share (429)
OVER_SHARE = "tenant_share"


class AdmissionLayer:
    def __init__(
        self,
        metrics: RequestMetrics,
        inner: Handler,
        tenants: Mapping[str, TenantConfig] | None = None,
        paths: Mapping[str, Handler] | None = None,
        stop: Callable[[InferCall], Awaitable[None]] | None = None,
    ) -> None:
        """``tenants``: the configured tenants, whose weights split each model's bound.
        ``paths``: each model's own path below (`gateway.pipeline.build.assemble`); a model
        without one goes to ``inner``. ``stop``: stops what a cancelled request left running
        (`gateway.pipeline.attempt.AttemptLayer.stop`)."""
        self._stop = stop
        self._metrics = metrics
        self._inner = inner
        self._paths = dict(paths or {})
        self._tenants = dict(tenants or {})
        # by model name, made at its first request
        self.models: dict[str, FairShare] = {}
        # refused, 429 and 503 alike
        self.shed: dict[str, int] = defaultdict(int)
        self._total = 0
        # set while nothing is in flight (for draining)
        self.idle = asyncio.Event()
        self.idle.set()

    @property
    def in_flight(self) -> defaultdict[str, int]:
        """Requests in flight by model (0 for a model that had none)."""
        return defaultdict(int, {name: share.held for name, share in self.models.items()})

    def load(self, name: str) -> float:
        """The model's requests in flight over its bound (0 before its first request)."""
        share = self.models.get(name)
        return share.held / share.bound if share is not None else 0.0

    async def __call__(self, call: InferCall) -> InferAnswer:
        name = call.model_name
        share = self.models.get(name)
        if share is None:
            share = self.share_of(name, call.model)
        try:
            seat = share.enter(call.tenant)
        except TooManyRequests:
            self.shed[name] += 1
            self._metrics.shed(name, OVER_SHARE)
            raise
        except Overloaded:
            # the model is full
            self.shed[name] += 1
            self._metrics.shed(name)
            raise
        self._total += 1
        if self._total == 1:
            self.idle.clear()
        try:
            return await self._paths.get(name, self._inner)(call)
        except asyncio.CancelledError:
            if self._stop is not None:
                await self._stop(call)
            raise
        finally:
            share.leave(seat)
            self._total -= 1
            if self._total == 0:
                self.idle.set()

    def share_of(self, name: str, model: ModelConfig) -> FairShare:
        """The model's admission decision and counts (made here at its first use)."""
        share = self.models.get(name)
        if share is None:
            weights = model_weights(self._tenants, model.auth.require_key)
            share = self.models[name] = FairShare(name, model.admission, weights)
        return share

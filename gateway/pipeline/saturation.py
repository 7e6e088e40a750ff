"""Saturation layer: a sheddable request is shed at once while every replica reports a full queue.

Where every eligible replica of a model's pool reports a queue over ``load.saturated_queue``
(`gateway.upstream.saturation`), sending it more only lengthens every queue. Requests of
sheddable priority (below 0: the tenant's ``priority``, else the model's, which anonymous
requests take unless ``tenants.anonymous`` sets one) are answered 503 at once, with a
``Retry-After`` from the reported queues, before they reach a replica; the others go
through. The layer is in a model's path only where some caller of it is sheddable and its
pools are ``load_aware`` (`gateway.pipeline.build.assemble`): for everyone else it costs
nothing, and for a request that is not sheddable one set look-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence

from gateway.call import Handler, InferAnswer, InferCall
from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.errors import Overloaded
from gateway.telemetry.metrics import RequestMetrics
from gateway.upstream.registry import Pool
from gateway.upstream.saturation import saturation

# the shed metric's reason
SATURATED = "saturated"


def sheddable(model: ModelConfig, tenants: Mapping[str, TenantConfig]) -> frozenset[str]:
    """The callers of ``model`` whose requests are sheddable (priority below 0): tenants by
    name, and ``anonymous`` for requests without a key."""
    callers = {name: tenant.priority for name, tenant in tenants.items()}
    callers.setdefault(ANONYMOUS, None)
    return frozenset(
        name
        for name, priority in callers.items()
        if (priority if priority is not None else model.priority) < 0
    )


class SaturationLayer:
    def __init__(
        self,
        pools: Sequence[Pool],
        shed: frozenset[str],
        clock: Clock,
        metrics: RequestMetrics,
        inner: Handler,
    ) -> None:
        """``pools``: the model's (any saturated sheds); ``shed``: its sheddable callers."""
        self._pools = tuple(p for p in pools if p.config.load_aware)
        self._shed = shed
        self._clock = clock
        self._metrics = metrics
        self._inner = inner

    def __call__(self, call: InferCall) -> Awaitable[InferAnswer]:
        if call.tenant in self._shed:
            now = self._clock.now()
            for pool in self._pools:
                wait_s = saturation(pool, now)
                if wait_s is not None:
                    self._metrics.shed(call.model_name, SATURATED)
                    threshold = pool.config.load.saturated_queue
                    raise Overloaded(
                        f"model {call.model_name!r}: every replica of pool {pool.name!r} "
                        f"reports a queue over {threshold:g}; sheddable requests are refused "
                        "until it shortens",
                        retry_after_s=wait_s,
                    )
        return self._inner(call)

"""Route layer: resolves the model's pool; later layers work on ``call.pool``.

Kept separate so voting (many pools per model) can take its place without touching balancing.
"""

from __future__ import annotations

from gateway.pipeline.call import Handler, InferCall, InferResult
from gateway.upstream.registry import Registry


class SingleRoute:
    def __init__(self, registry: Registry, inner: Handler) -> None:
        self._registry = registry
        self._inner = inner

    async def __call__(self, call: InferCall) -> InferResult:
        call.pool = self._registry.pools[call.model.pool]
        return await self._inner(call)

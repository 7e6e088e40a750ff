"""Route layer: sends the call down the model's route, a single pool or a vote over pools.

Routes are picked by name from a dict (as uvicorn picks its loop) instead of ``if`` branches;
each route hands ``call.pool`` to the same per-pool leg: retry, hedge, balance, attempt.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.pipeline.call import Handler, InferCall, InferResult
from gateway.upstream.registry import Registry


class SingleRoute:
    def __init__(self, registry: Registry, leg: Handler) -> None:
        self._registry = registry
        self._leg = leg

    async def __call__(self, call: InferCall) -> InferResult:
        call.pool = self._registry.pools[call.model.pools[0]]
        return await self._leg(call)


class Router:
    def __init__(self, routes: Mapping[str, Handler]) -> None:
        self._routes = dict(routes)

    async def __call__(self, call: InferCall) -> InferResult:
        return await self._routes[call.model.route](call)

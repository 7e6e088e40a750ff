"""Route layer: sends the call down the model's route, a single pool or a vote over pools.

Routes are picked by name from a dict (as uvicorn picks its loop) instead of ``if`` branches;
each route opens a `Leg` (the request on one pool, with its `Tries`) and hands it to the same
per-pool leg: retry, hedge, balance, attempt.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.pipeline.call import Handler, InferCall, InferResult, Leg, LegHandler, Tries
from gateway.upstream.registry import Registry


class SingleRoute:
    def __init__(self, registry: Registry, leg: LegHandler) -> None:
        self._registry = registry
        self._leg = leg

    async def __call__(self, call: InferCall) -> InferResult:
        pool = self._registry.pools[call.model.pools[0]]
        return await self._leg(Leg(call, Tries(call.ledger, pool)))


class Router:
    def __init__(self, routes: Mapping[str, Handler]) -> None:
        self._routes = dict(routes)

    async def __call__(self, call: InferCall) -> InferResult:
        return await self._routes[call.model.route](call)

"""Route layer: sends the call down the model's route: a single pool, a vote over pools, or a
rollout (the pool and a candidate pool, `gateway.rollout.route`).

Routes are picked by name from a dict (as uvicorn picks its loop) instead of ``if`` branches;
each route opens a `Leg` (the request on one pool, with its `Attempts`) and hands it to the same
per-pool leg: retry, hedge, balance, attempt. A leg's request is in its pool's dialect
(`gateway.call.speak`): unchanged for a pool that speaks the client's, else re-encoded in the
pool's names.
The router counts each request once towards the retry budget's allowance (``count``): a vote's
k legs are one request, not k; every send beyond a leg's first is paid from that budget below
(retries, hedges, a vote's tie-breaks).

A route has nothing to do once its leg is under way, so its ``__call__`` is a plain function
that returns the leg's awaitable: no coroutine of its own in every request's await chain (each
frame in that chain is created, resumed at every wake-up, and torn down).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from gateway.call import Attempts, Handler, InferAnswer, InferCall, Leg, LegHandler, speak
from gateway.upstream.registry import Registry


class SingleRoute:
    def __init__(
        self, registry: Registry, leg: LegHandler, count: Callable[[], None] | None = None
    ) -> None:
        """``count``: counts the request towards the retry budget's allowance, where this
        route is a model's own (`gateway.pipeline.build.assemble`), not the `Router`'s."""
        self._registry = registry
        self._leg = leg
        self._count = count

    def __call__(self, call: InferCall) -> Awaitable[InferAnswer]:
        if self._count is not None:
            self._count()
        model = call.model
        # `ModelConfig.pools` without its property: each read of a config is a pydantic
        # model's ``__getattr__`` hook, and a single route's model has no vote
        vote = model.vote
        pool = self._registry.pools[(model.pool or "") if vote is None else vote.pools[0]]
        return self._leg(Leg(speak(call, pool), Attempts(call.ledger, pool)))


class Router:
    def __init__(self, routes: Mapping[str, Handler], count: Callable[[], None]) -> None:
        self._routes = dict(routes)
        self._count = count

    def __call__(self, call: InferCall) -> Awaitable[InferAnswer]:
        self._count()
        route = "rollout" if call.model.rollout is not None else call.model.route
        return self._routes[route](call)


class Counted:
    """A route that is a model's own (a vote, a rollout): the request counted once, as the
    `Router` counts it."""

    __slots__ = ("_count", "_route")

    def __init__(self, route: Handler, count: Callable[[], None]) -> None:
        self._route = route
        self._count = count

    def __call__(self, call: InferCall) -> Awaitable[InferAnswer]:
        self._count()
        return self._route(call)

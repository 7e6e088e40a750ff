"""The burn policy's vote on a single-route model: its requests voted over k versions while the
control process says so, within a cap on the replica capacity the vote may take.

Only a model whose burn policy may vote (``burn_policy.vote.enabled``) gets this route, at
load (`gateway.pipeline.build.assemble`); every other model keeps its plain route and pays
nothing. Per request it reads one mapping, ``escalated`` (model -> why), kept in place by
whoever decides: the control's `gateway.slo.engine.SloBook` in one process, the worker's
snapshot mirror (`gateway.worker.mirror`) in a data-plane worker. While the model is in it,
the request goes to the gateway's vote route as a voted model (its `ModelConfig.escalation_vote`)
and its answer says so in ``x-vote`` (``3/3; escalated``); while the vote's legs beyond the
single route's would exceed ``max_extra_in_flight`` (this worker's share), a request takes the
single route (counted in `over_cap`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Mapping

from gateway.call import Handler, InferAnswer, InferCall
from gateway.config.models import ModelConfig

# what an escalated answer's x-vote says after its tally
ESCALATED = "escalated"


class EscalatingRoute:
    def __init__(
        self,
        name: str,
        model: ModelConfig,
        single: Handler,
        vote: Handler,
        escalated: Mapping[str, str],
    ) -> None:
        voted = model.escalation_vote
        assert voted is not None, "only a model whose burn policy may vote gets this route"
        self._name = name
        self._single = single
        self._vote = vote
        self._escalated = escalated
        self._voted = model.model_copy(update={"vote": voted, "pool": None})
        # legs per request beyond the single route's
        self._extra = len(voted.pools) - 1
        self._cap = model.burn_policy.vote.max_extra_in_flight
        # voted requests in flight
        self.in_flight = 0
        # requests that took the single route for the cap
        self.over_cap = 0

    def __call__(self, call: InferCall) -> Awaitable[InferAnswer]:
        if self._name not in self._escalated:
            return self._single(call)
        if (self.in_flight + 1) * self._extra > self._cap:
            self.over_cap += 1
            return self._single(call)
        return self._voting(call)

    async def _voting(self, call: InferCall) -> InferAnswer:
        self.in_flight += 1
        try:
            result = await self._vote(dataclasses.replace(call, model=self._voted))
        finally:
            self.in_flight -= 1
        if result.vote is not None:
            result.vote = f"{result.vote}; {ESCALATED}"
        return result

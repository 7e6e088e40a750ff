"""Balance layer: picks the replica for this attempt among the admissible ones.

Admissible = not yet tried by this request and not known to be unhealthy; when none is
admissible by health (every probe failing), it spreads over all untried replicas rather than
refusing outright (panic mode), since probes can lag reality.
"""

from __future__ import annotations

from gateway.errors import NoReplicaAvailable
from gateway.pipeline.call import Handler, InferCall, InferResult
from gateway.policies.selection import PowerOfTwoChoices
from gateway.upstream.replica import Replica


class BalanceLayer:
    def __init__(self, selector: PowerOfTwoChoices, inner: Handler) -> None:
        self._selector = selector
        self._inner = inner

    async def __call__(self, call: InferCall) -> InferResult:
        assert call.pool is not None, "route layer sets the pool"
        untried = [r for r in call.pool.replicas if r.id not in call.tried]
        replica = self._selector.pick(_admissible(untried) or untried)
        if replica is None:
            raise NoReplicaAvailable(
                f"model {call.model_name!r}: no replica of pool {call.pool.name!r} is available"
            )
        call.replica = replica
        return await self._inner(call)


def _admissible(replicas: list[Replica]) -> list[Replica]:
    return [r for r in replicas if r.healthy is not False]

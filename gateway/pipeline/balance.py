"""Balance layer: picks the replica for this attempt among the eligible ones.

Eligibility (health, ejection, breaker, hot spares, panic) is decided in
`gateway.upstream.eligibility`; the choice among eligible replicas by `PowerOfTwoChoices`.
A vote's legs share a set of zones taken, so where the config names failure domains the legs
land in distinct ones when they can. A half-open breaker may refuse the permit at the last
moment (its probe slots are taken), in which case the next candidate is picked. The chosen
replica and the breaker state it was admitted under are written to the call and read by the
attempt layer before any ``await``.
"""

from __future__ import annotations

from gateway.clock import Clock
from gateway.errors import NoReplicaAvailable
from gateway.pipeline.call import Handler, InferCall, InferResult
from gateway.policies.selection import PowerOfTwoChoices
from gateway.upstream.eligibility import eligible
from gateway.upstream.replica import Replica


class BalanceLayer:
    def __init__(self, selector: PowerOfTwoChoices, clock: Clock, inner: Handler) -> None:
        self._selector = selector
        self._clock = clock
        self._inner = inner

    async def __call__(self, call: InferCall) -> InferResult:
        assert call.pool is not None, "route layer sets the pool"
        candidates = eligible(call.pool, call.tried, self._clock.now())
        taken = call.zones_taken
        if taken:  # a vote leg: prefer a failure domain no other leg is in
            candidates = [r for r in candidates if r.zone not in taken] or candidates
        while candidates:
            replica = self._selector.pick(candidates)
            assert replica is not None
            breaker = replica.breaker
            if breaker is None or breaker.closed:  # the hot path: no permit to take
                call.replica, call.breaker_state = replica, "closed"
                _take_zone(taken, replica)
                return await self._inner(call)
            state = breaker.state()
            if breaker.acquire():
                call.replica, call.breaker_state = replica, state
                _take_zone(taken, replica)
                return await self._inner(call)
            candidates.remove(replica)
        raise NoReplicaAvailable(
            f"model {call.model_name!r}: no replica of pool {call.pool.name!r} is available "
            f"({len(call.tried)} tried; others down, ejected or with open breakers)"
        )


def _take_zone(taken: set[str] | None, replica: Replica) -> None:
    if taken is not None and replica.zone is not None:
        taken.add(replica.zone)

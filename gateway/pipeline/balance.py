"""Balance layer: picks the replica for this attempt among the eligible ones.

Eligibility (health, ejection, breaker, hot spares, panic) is decided in
`gateway.upstream.eligibility`; the choice among eligible replicas by `PowerOfTwoChoices`,
which weighs the queues replicas reported no longer than ``load.stale_s`` ago in a pool that
is ``load_aware`` (eligibility is not changed by a report: spares, zones, panic and the
ejected-share cap keep their rules, and the load only orders the replicas they allow).
A vote's legs share a set of zones taken, so where the config names failure domains the legs
land in distinct ones when they can. A half-open breaker may refuse the permit at the last
moment (its probe slots are taken), in which case the next candidate is picked. The chosen
replica is taken on the leg's `Attempts` (tried, counted, its zone taken) and handed down as an
`Attempt` with the breaker state it was admitted under.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable

from gateway.call import Attempt, AttemptHandler, InferAnswer, Leg
from gateway.clock import Clock
from gateway.errors import NoReplicaAvailable
from gateway.upstream.eligibility import eligible
from gateway.upstream.selection import PowerOfTwoChoices


class BalanceLayer:
    def __init__(self, selector: PowerOfTwoChoices, clock: Clock, inner: AttemptHandler) -> None:
        self._selector = selector
        self._clock = clock
        self._inner = inner

    def __call__(self, leg: Leg) -> Awaitable[InferAnswer]:
        """The chosen replica's attempt, handed on as it is (no coroutine of its own); with no
        replica to try, `NoReplicaAvailable` is raised at once."""
        attempts = leg.attempts
        pool = attempts.pool
        now = self._clock.now()
        candidates = eligible(pool, attempts.tried, now)
        taken = attempts.zones
        # a vote leg: prefer a failure domain no other leg is in
        if taken:
            candidates = [r for r in candidates if r.zone not in taken] or candidates
        fresh_after = now - pool.load_stale_s if pool.load_aware else math.inf
        while candidates:
            replica = self._selector.pick(candidates, fresh_after)
            assert replica is not None
            breaker = replica.breaker
            # the hot path: no permit to take
            if breaker is None or breaker.closed:
                attempts.take(replica)
                return self._inner(Attempt(leg, replica, "closed"))
            state = breaker.state()
            if breaker.acquire():
                attempts.take(replica)
                return self._inner(Attempt(leg, replica, state))
            candidates.remove(replica)
        # an operator's pause: say so, not "down"; who paused
        if pool.paused is not None:
            # it and why stay in the keyed /admin/state (a reason may name a node or a person)
            raise NoReplicaAvailable(f"model {leg.call.model_name!r}: pool {pool.name!r} is paused")
        raise NoReplicaAvailable(
            f"model {leg.call.model_name!r}: no replica of pool {pool.name!r} is "
            f"available ({len(attempts.tried)} tried; others down, ejected or with open breakers)"
        )

"""Which replicas of a pool may take traffic now: health, ejection, breaker, spares, panic.

Order of reasoning, written once: a replica is *usable* when it is not known unhealthy, not
ejected and its breaker admits. Standby replicas (hot spares) join only while some active
replica is unusable. If the usable share of the pool falls below the panic threshold, health
and ejection are ignored and load spreads over every replica whose breaker admits, rather than
melting the few survivors (Envoy's panic mode); open breakers and quarantines (wrong answers)
are still honoured, so a pool that fails every request answers fast 503s instead of timeouts,
and a replica known to answer wrongly is never used. A pool an operator paused
(`gateway.upstream.controls`) has no eligible replica at all, panic or not; a replica an
operator drained or ejected is not a member while held (`Pool.drain`), so it is never seen here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from gateway.config.pool import PoolConfig
from gateway.upstream.replica import Replica


class PoolMembers(Protocol):
    """What eligibility reads of a pool (`gateway.upstream.registry.Pool` is one): its members
    and its panic threshold. A protocol, so the registry can import this module for its
    snapshot's ``panic`` without an import cycle."""

    @property
    def config(self) -> PoolConfig: ...

    @property
    def panic_share(self) -> float:
        """``config.panic_threshold_percent / 100``."""
        ...

    @property
    def replicas(self) -> Sequence[Replica]: ...

    @property
    def paused(self) -> str | None: ...


def _admitted(replica: Replica, now: float) -> bool:
    if replica.quarantined_until > now:
        return False
    breaker = replica.breaker
    return breaker is None or breaker.closed or breaker.admits()


def _usable(pool: PoolMembers, now: float) -> tuple[list[Replica], list[Replica], int]:
    """The usable replicas, the usable actives, and how many actives there are, in one pass
    over the members (every attempt runs it): usable is not known unhealthy, not ejected and
    `_admitted`."""
    usable: list[Replica] = []
    actives: list[Replica] = []
    active_total = 0
    for r in pool.replicas:
        standby = r.standby
        if not standby:
            active_total += 1
        if r.healthy is False or r.ejected_until > now or r.quarantined_until > now:
            continue
        breaker = r.breaker
        # `_admitted`, inlined
        if breaker is None or breaker.closed or breaker.admits():
            usable.append(r)
            if not standby:
                actives.append(r)
    return usable, actives, active_total


def _panics(pool: PoolMembers, usable: list[Replica]) -> bool:
    return len(usable) < pool.panic_share * len(pool.replicas)


def in_panic(pool: PoolMembers, now: float) -> bool:
    """Whether too few replicas are usable now, so `eligible` spreads over all of them."""
    return _panics(pool, _usable(pool, now)[0])


def eligible(pool: PoolMembers, tried: set[str], now: float) -> list[Replica]:
    """The replicas not yet tried that may take this attempt (a new list: the caller may take
    from it); writes nothing."""
    if pool.paused is not None:
        return []
    usable, actives, active_total = _usable(pool, now)
    if _panics(pool, usable):
        return [r for r in pool.replicas if r.id not in tried and _admitted(r, now)]
    chosen = actives if len(actives) == active_total else usable
    if not tried:
        return chosen
    return [r for r in chosen if r.id not in tried]

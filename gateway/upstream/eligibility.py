"""Which replicas of a pool may take traffic now: health, ejection, breaker, spares, panic.

Order of reasoning, written once: a replica is *usable* when it is not known unhealthy, not
ejected and its breaker admits. Standby replicas (hot spares) join only while some active
replica is unusable. If the usable share of the pool falls below the panic threshold, health
and ejection are ignored and load spreads over every replica whose breaker admits, rather than
melting the few survivors (Envoy's panic mode); open breakers and quarantines (wrong answers)
are still honoured, so a pool that fails every request answers fast 503s instead of timeouts,
and a replica known to answer wrongly is never used.
"""

from __future__ import annotations

from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica


def _admitted(replica: Replica, now: float) -> bool:
    if replica.quarantined_until > now:
        return False
    breaker = replica.breaker
    return breaker is None or breaker.closed or breaker.admits()


def eligible(pool: Pool, tried: set[str], now: float) -> list[Replica]:
    usable = [
        r
        for r in pool.replicas
        if r.healthy is not False and r.ejected_until <= now and _admitted(r, now)
    ]
    threshold = pool.config.panic_threshold_percent / 100 * len(pool.replicas)
    pool.panic = len(usable) < threshold
    if pool.panic:
        return [r for r in pool.replicas if r.id not in tried and _admitted(r, now)]
    actives = [r for r in usable if not r.standby]
    active_total = sum(1 for r in pool.replicas if not r.standby)
    chosen = actives if len(actives) == active_total else usable
    return [r for r in chosen if r.id not in tried]

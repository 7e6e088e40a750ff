"""Whether a pool is saturated: every replica that may take traffic reports a deep queue.

A ``load_aware`` pool is saturated when it has eligible replicas (`gateway.upstream.
eligibility`: health, ejection, breakers, spares, panic as for any attempt) and every one of
them reported, within ``load.stale_s``, a queue over ``load.saturated_queue``. One replica
without a fresh reading, or with a short queue, and the pool is not saturated: an unknown
queue is never taken for a full one either. While a pool is saturated a request of sheddable
priority is shed at once (`gateway.pipeline.saturation`), told to come back after the time
the least loaded replica needs to bring its queue back to the threshold: its excess over it
at the rate it answers, ``(queue + 1) / latency`` by Little's law (its EWMA latency as this
gateway sees it, waiting included).
"""

from __future__ import annotations

from gateway.upstream.eligibility import PoolMembers, eligible

# Retry-After when no latency is known yet
UNKNOWN_RATE_RETRY_S = 1.0


def saturation(pool: PoolMembers, now: float) -> float | None:
    """None: the pool is not saturated; else how long its queues need (seconds, > 0)."""
    config = pool.config
    if not config.load_aware:
        return None
    load = config.load
    replicas = eligible(pool, set(), now)
    if not replicas:
        # nothing to saturate: no replica is a 503 of its own
        return None
    fresh_after = now - load.stale_s
    threshold = load.saturated_queue
    least = None
    for replica in replicas:
        if replica.load_at < fresh_after or replica.reported_queue <= threshold:
            return None
        if least is None or replica.reported_queue < least.reported_queue:
            least = replica
    assert least is not None
    latency = least.ewma_latency_s
    if latency <= 0:
        return UNKNOWN_RATE_RETRY_S
    queue = least.reported_queue
    return (queue - threshold) * latency / (queue + 1)

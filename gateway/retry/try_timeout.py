"""The per-try timeout: learned from the pool's latency while a retry is still possible.

A fixed per-try timeout is either too long (every request that meets a hung replica waits it
out, as with nginx's and HAProxy's fixed timeouts) or too short (healthy slow answers are thrown
away). The pool's own recent p99 says what "too long" means right now; the last try gets all
that's left.
"""

from __future__ import annotations

from gateway.config.policies import TryTimeoutConfig
from gateway.upstream.latency import LatencyWindow


def try_timeout(
    config: TryTimeoutConfig, latency: LatencyWindow, remaining_s: float, retry_possible: bool
) -> float:
    if not config.adaptive or not retry_possible:
        return remaining_s
    observed = latency.quantile(config.quantile)
    if observed is None or latency.count < config.min_samples:
        return min(config.cold_ms / 1000, remaining_s)
    learned = max(config.min_ms / 1000, config.multiplier * observed)
    return min(learned, remaining_s)

"""Active health probes: one jittered loop per replica against its V2 model-ready endpoint.

A replica turns unhealthy after ``unhealthy_threshold`` consecutive failed probes and healthy
again after ``healthy_threshold`` consecutive passes (Envoy's model); the first verdict is
taken at once so a freshly started gateway does not wait thresholds before serving. While an
unhealthy replica is passing, the next probe comes after the short ``healthy_edge_interval_s``
(Envoy's ``healthy_edge_interval``), and once it turns healthy its open breaker goes half-open
and any ejection ends (`readmit`): a restarted replica gets a trial at once instead of waiting
out the breaker's reset timeout while the fallback answers.
A probe that failed for the gateway's own shortage (file descriptors, memory: a
`LocalResourceError`) is no verdict either way. Probes run as background tasks and never touch
the request path's locks or queues. A replica that joins its pool later (DNS discovery) gets its
loop then; one that leaves loses it.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

from gateway.config.policies import HealthCheckConfig
from gateway.errors import LocalResourceError, UpstreamError
from gateway.upstream.probes.prober import Prober
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)


def apply_probe(
    replica: Replica,
    passed: bool,
    error: str | None,
    config: HealthCheckConfig,
    *,
    first: bool = False,
) -> bool | None:
    """Feeds one probe result; returns the new health if it changed, else None. ``first``: the
    first probe of a replica that joined a serving pool, held out until then: it decides."""
    first = first or replica.healthy is None
    if passed:
        replica.probe_passed()
        flips = first or replica.probe_successes >= config.healthy_threshold
        new = True
    else:
        replica.probe_failed(f"health probe: {error}")
        flips = first or replica.probe_failures >= config.unhealthy_threshold
        new = False
    if flips and replica.healthy is not new:
        replica.mark_health(new)
        return new
    return None


def readmit(pool: Pool, replica: Replica) -> None:
    """A replica the probes saw recover: end its ejection, give its open breaker a trial."""
    # first: the breaker's transition then shares no ejection
    pool.outlier.reinstate(replica)
    if replica.breaker is not None:
        replica.breaker.trial()


def next_interval(replica: Replica, config: HealthCheckConfig) -> float:
    """The pause before the next probe: short while an unhealthy replica is passing."""
    if replica.healthy is False and replica.probe_successes > 0:
        return config.healthy_edge_interval_s
    return config.interval_s


class HealthProber(Prober):
    def loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        return [
            (f"probe:{replica.id}", self._loop(pool, replica, first=False))
            for pool in self._registry.pools.values()
            # held out by an operator at start
            for replica in (*pool.replicas, *pool.draining)
        ]

    def start(self) -> None:
        super().start()
        self._registry.watch(self)

    async def stop(self) -> None:
        self._registry.unwatch(self)
        await super().stop()

    def joined(self, pool: Pool, replica: Replica) -> None:
        self.start_loop(f"probe:{replica.id}", self._loop(pool, replica, first=True))

    def left(self, pool: Pool, replica: Replica) -> None:
        self.stop_loop(f"probe:{replica.id}")

    async def probe(self, pool: Pool, replica: Replica) -> tuple[bool | None, str | None]:
        """Passed or not, and why not; None when the probe says nothing of the replica (the
        gateway itself was short of file descriptors or memory)."""
        try:
            response = await self._transport.request(
                replica.endpoint,
                "GET",
                pool.model_path("/ready"),
                timeout=pool.config.health.timeout_s,
            )
        except LocalResourceError as exc:
            return None, exc.message
        except UpstreamError as exc:
            return False, exc.message
        if response.status == 200:
            return True, None
        return False, f"ready answered {response.status}"

    async def _loop(self, pool: Pool, replica: Replica, *, first: bool) -> None:
        config = pool.config.health
        while True:
            passed, error = await self.probe(pool, replica)
            changed = None
            if passed is not None:
                changed = apply_probe(replica, passed, error, config, first=first)
                first = False
            if changed is not None:
                log.log(
                    # recovering is no warning
                    logging.INFO if changed else logging.WARNING,
                    "replica %s is now %s%s",
                    replica.id,
                    "healthy" if changed else "unhealthy",
                    "" if changed else f" ({error})",
                )
            if changed:
                readmit(pool, replica)
            jitter = 1.0 + config.jitter * (2 * self._rng.random() - 1)
            await self._clock.sleep(next_interval(replica, config) * jitter)

"""Passive outlier detection: replicas failing live traffic are ejected for a while.

Envoy's consecutive-5xx detector, simplified: ``consecutive_failures`` failed attempts in a row
(5xx, connect error, timeout) eject a replica for ``base_ejection_s × times ejected`` (capped),
but never more than ``max_ejection_percent`` of a pool (at least one replica may always be
ejected, as in Envoy). Ejection ends by time, or early when active health checks turn the
replica healthy again (Envoy's ``successful_active_health_check_uneject_host``).

A streak that lasts ejects too, however short: two or more failures in a row whose first try
began ``failing_for_s`` ago or more. A count alone misses a replica that gets few tries: a hung
one whose load report (a queue that never drains) keeps load-aware routing away from it got 4
tries in 60 s, each a timeout, and stayed in the pool. An overloaded replica answers some of
its tries, which ends the streak; one that answers none of them for that long is not serving.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gateway.clock import Clock
from gateway.config.policies import OutlierConfig
from gateway.outcome import REPLICA_FAILURES, Outcome, OutcomeKind
from gateway.upstream.events import NullEvents, UpstreamEvents
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)


def within_cap(out: int, size: int, percent: float) -> bool:
    """Whether a pool of ``size`` with ``out`` replicas out may take one more out: at most
    ``percent`` of it, though one may always be (as in Envoy)."""
    return out == 0 or out + 1 <= percent * size / 100


class OutlierDetector:
    def __init__(
        self,
        replicas: Sequence[Replica],
        config: OutlierConfig,
        clock: Clock,
        events: UpstreamEvents | None = None,
    ) -> None:
        self._replicas = replicas
        self._config = config
        self._clock = clock
        self._events = events or NullEvents()

    def track(self, replicas: Sequence[Replica]) -> None:
        """The pool's members changed (DNS discovery): its ejection cap counts these."""
        self._replicas = replicas

    def is_ejected(self, replica: Replica) -> bool:
        return replica.ejected(self._clock.now())

    def ejected_count(self) -> int:
        now = self._clock.now()
        return sum(1 for r in self._replicas if r.ejected(now))

    def observe(self, replica: Replica, outcome: Outcome) -> None:
        kind = outcome.kind
        if kind not in REPLICA_FAILURES:
            # `Outcome.is_failure`, read once
            if kind is OutcomeKind.SUCCESS and replica.ejections and self._forgiven(replica):
                replica.forget_ejections()
            return
        config = self._config
        failures = replica.consecutive_failures
        now = self._clock.now()
        if failures == 1:
            # a streak begins when its first failed try did
            replica.failing_since = now - outcome.latency_s
        if failures >= config.consecutive_failures:
            reason, rule = f"{failures} consecutive failures", "consecutive_failures"
        elif failures >= 2 and 0 < config.failing_for_s <= now - replica.failing_since:
            span = now - replica.failing_since
            reason, rule = f"{failures} failures in a row over {span:.1f} s", "failing_for"
        else:
            return
        if self.eject(replica, reason):
            self._events.ejection(replica.id, rule)

    def eject(self, replica: Replica, reason: str) -> bool:
        """Ejects unless already ejected or the pool's ejection cap is reached."""
        now = self._clock.now()
        if replica.ejected(now) or not self.admits():
            return False
        duration = min(
            self._config.base_ejection_s * (replica.ejections + 1), self._config.max_ejection_s
        )
        replica.eject(now, duration, reason)
        log.warning("replica %s ejected for %.1f s: %s", replica.id, duration, reason)
        return True

    def admits(self) -> bool:
        """Whether one more ejection stays within the pool's cap (another gateway's too)."""
        ejected = self.ejected_count()
        return within_cap(ejected, len(self._replicas), self._config.max_ejection_percent)

    def reinstate(self, replica: Replica) -> bool:
        """Ends an ejection early (active health checks saw the replica recover)."""
        if not replica.ejected(self._clock.now()):
            return False
        replica.reinstate()
        log.warning("replica %s reinstated: health checks pass again", replica.id)
        return True

    def _forgiven(self, replica: Replica) -> bool:
        """A replica healthy for max_ejection_s since its last ejection starts afresh."""
        return self._clock.now() - replica.last_ejected_at > self._config.max_ejection_s

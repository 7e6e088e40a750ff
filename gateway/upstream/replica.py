"""Live state of one replica as this gateway sees it.

Reactors (the attempt layer, the prober, later the outlier detector and breaker) write here;
the balancer and `/admin/state` read it. Nothing in it does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.config.models import ReplicaConfig
from gateway.upstream.transport import Endpoint

if TYPE_CHECKING:
    from gateway.upstream.breaker import ReplicaBreaker

EWMA_WEIGHT = 0.2  # weight of the newest latency sample


@dataclass(slots=True)
class Replica:
    id: str
    pool: str
    endpoint: Endpoint
    zone: str | None = None
    healthy: bool | None = None  # None until the first probe verdict
    outstanding: int = 0
    ewma_latency_s: float = 0.0
    requests: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    last_error: str | None = None
    probe_successes: int = 0
    probe_failures: int = 0
    standby: bool = False
    ejected_until: float = 0.0
    ejections: int = 0
    last_ejected_at: float = 0.0
    ejection_reason: str | None = None
    quarantined_until: float = 0.0  # wrong answers: excluded even in panic mode
    quarantine_reason: str | None = None
    golden_failures: int = 0
    golden_last: str | None = None
    breaker: ReplicaBreaker | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, pool: str, config: ReplicaConfig) -> Replica:
        return cls(
            id=config.id,
            pool=pool,
            endpoint=config.endpoint,
            zone=config.zone,
            standby=config.standby,
        )

    @property
    def url(self) -> str:
        return self.endpoint.base_url

    def started(self) -> None:
        self.outstanding += 1
        self.requests += 1

    def finished(self, latency_s: float, error: str | None, *, judged: bool = True) -> None:
        """An attempt ended; ``judged=False`` when its verdict waits for evidence (`charge`)."""
        self.outstanding -= 1
        if self.ewma_latency_s == 0.0:
            self.ewma_latency_s = latency_s
        else:
            self.ewma_latency_s += EWMA_WEIGHT * (latency_s - self.ewma_latency_s)
        if not judged:
            return
        if error is None:
            self.consecutive_failures = 0
        else:
            self.charge(error)

    def charge(self, error: str) -> None:
        """Counts one failure against the replica."""
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = error

    def quarantine(self, now: float, duration_s: float, reason: str) -> bool:
        """Takes the replica out for wrong answers; False if it already was."""
        if self.quarantined_until > now:
            return False
        self.quarantined_until = now + duration_s
        self.quarantine_reason = reason
        return True

    def snapshot(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "zone": self.zone,
            "standby": self.standby,
            "healthy": self.healthy,
            "breaker": self.breaker.snapshot() if self.breaker else None,
            "ejected": self.ejected_until > now,
            "ejected_for_s": round(max(0.0, self.ejected_until - now), 3),
            "ejections": self.ejections,
            "ejection_reason": self.ejection_reason,
            "quarantined": self.quarantined_until > now,
            "quarantined_for_s": round(max(0.0, self.quarantined_until - now), 3),
            "quarantine_reason": self.quarantine_reason,
            "golden_last": self.golden_last,
            "outstanding": self.outstanding,
            "ewma_latency_ms": round(self.ewma_latency_s * 1000, 3),
            "requests": self.requests,
            "failures": self.failures,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
        }

"""Live state of one replica as this gateway sees it, changed only through its own methods.

Reactors (the attempt layer, the probers, the outlier detector, shared state) decide *what*
happened and call one named method here to record it; none assigns a field. So every change to
a replica's state is in this file, and the balancer and `/admin/state` read one consistent
object. Nothing in it does I/O or reads a clock: times come in as arguments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.config.endpoint import Endpoint
from gateway.config.replica import ReplicaConfig
from gateway.policies.load_report import LoadReport

if TYPE_CHECKING:
    from gateway.upstream.breaker import ReplicaBreaker

# weight of the newest latency sample
EWMA_WEIGHT = 0.2
# What a reload carries over (`carry_from`): every judgement, none of the identity or config.
CARRIED = (
    "healthy",
    "ewma_latency_s",
    "requests",
    "failures",
    "consecutive_failures",
    "failing_since",
    "last_error",
    "probe_successes",
    "probe_failures",
    "ejected_until",
    "ejections",
    "last_ejected_at",
    "ejection_reason",
    "quarantined_until",
    "quarantine_reason",
    "golden_failures",
    "golden_last",
    "load",
    "load_at",
    "reported_queue",
)


@dataclass(slots=True)
class Replica:
    id: str
    pool: str
    endpoint: Endpoint
    zone: str | None = None
    # None until the first probe verdict
    healthy: bool | None = None
    outstanding: int = 0
    ewma_latency_s: float = 0.0
    requests: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    # when the current streak of failures began: its first failed try's start (monotonic
    # seconds; read only while ``consecutive_failures`` > 0)
    failing_since: float = 0.0
    last_error: str | None = None
    probe_successes: int = 0
    probe_failures: int = 0
    standby: bool = False
    ejected_until: float = 0.0
    ejections: int = 0
    last_ejected_at: float = 0.0
    ejection_reason: str | None = None
    # wrong answers: excluded even in panic mode
    quarantined_until: float = 0.0
    quarantine_reason: str | None = None
    golden_failures: int = 0
    golden_last: str | None = None
    # the balancer's share: lowered while its accelerator is throttled
    weight: float = 1.0
    # the latest load it reported (`report_load`)
    load: LoadReport | None = None
    # when that reading was taken (monotonic seconds)
    load_at: float = -math.inf
    # its queue: ``load.queue`` (read by the balancer)
    reported_queue: float = 0.0
    breaker: ReplicaBreaker | None = field(default=None, repr=False)

    @classmethod
    def from_config(
        cls,
        pool: str,
        config: ReplicaConfig,
        breaker: ReplicaBreaker | None = None,
        endpoint: Endpoint | None = None,
    ) -> Replica:
        """``endpoint``: the replica's with its pool's TLS and headers (`PoolConfig.endpoint`)."""
        return cls(
            id=config.id,
            pool=pool,
            endpoint=endpoint or config.endpoint,
            zone=config.zone,
            standby=config.standby,
            breaker=breaker,
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

    def succeeded(self, latencies_s: Sequence[float]) -> None:
        """Judged successful attempts that ended, in order (`started` and `finished` for each,
        outstanding left as it was)."""
        self.requests += len(latencies_s)
        ewma = self.ewma_latency_s
        for latency_s in latencies_s:
            ewma = latency_s if ewma == 0.0 else ewma + EWMA_WEIGHT * (latency_s - ewma)
        self.ewma_latency_s = ewma
        self.consecutive_failures = 0

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

    def ejected(self, now: float) -> bool:
        return self.ejected_until > now

    def eject(self, now: float, duration_s: float, reason: str) -> None:
        """Records an ejection the outlier detector decided; its failure streak starts afresh."""
        self.ejections += 1
        self.ejected_until = now + duration_s
        self.last_ejected_at = now
        self.ejection_reason = reason
        self.consecutive_failures = 0

    def reinstate(self) -> None:
        """Ends the ejection now (the reason and the count stay, for `/admin/state`)."""
        self.ejected_until = 0.0

    def forget_ejections(self) -> None:
        """Long good since its last ejection: the next one is as short as the first."""
        self.ejections = 0

    def adopt_ejection(self, until: float, reason: str) -> None:
        """Takes an ejection another gateway decided; it never shortens one of our own."""
        self.ejected_until = max(self.ejected_until, until)
        self.ejection_reason = reason

    def probe_passed(self) -> None:
        self.probe_successes += 1
        self.probe_failures = 0

    def probe_failed(self, error: str) -> None:
        self.probe_failures += 1
        self.probe_successes = 0
        self.last_error = error

    def mark_health(self, healthy: bool) -> None:
        """The health verdict, once the prober's thresholds are met."""
        self.healthy = healthy

    def assign_standby(self, standby: bool) -> None:
        """Active or hot spare, as the pool's discovery now says (an SRV priority changed)."""
        self.standby = standby

    def set_weight(self, weight: float) -> None:
        """The balancer's share, as the accelerator rules now say (1: full)."""
        self.weight = weight

    def report_load(self, report: LoadReport, at: float) -> None:
        """A reading of its load taken at ``at`` (an answer's report, a scrape, or the control
        process's freshest); one older than the reading it has is ignored."""
        if at >= self.load_at:
            self.load = report
            self.load_at = at
            self.reported_queue = report.queue

    def fresh_load(self, now: float, stale_s: float) -> LoadReport | None:
        """Its reading, unless older than ``stale_s`` (then: none, never an empty queue)."""
        return self.load if now - self.load_at <= stale_s else None

    def golden_passed(self, reason: str) -> None:
        self.golden_last = reason
        self.golden_failures = 0

    def golden_failed(self, reason: str) -> int:
        """Records a wrong golden answer; returns the misses in a row."""
        self.golden_last = reason
        self.golden_failures += 1
        return self.golden_failures

    def follow(
        self,
        *,
        healthy: bool | None,
        ejected_until: float,
        ejection_reason: str | None,
        quarantined_until: float,
        quarantine_reason: str | None,
        weight: float,
        standby: bool,
    ) -> None:
        """Takes the verdicts the control process reached on this replica (a data-plane
        worker's mirror of its registry, `gateway.worker.mirror`): health, ejection,
        quarantine, weight, spare or not. Outstanding, latency and breaker stay this
        worker's own."""
        self.healthy = healthy
        self.ejected_until = ejected_until
        self.ejection_reason = ejection_reason
        self.quarantined_until = quarantined_until
        self.quarantine_reason = quarantine_reason
        self.weight = weight
        self.standby = standby

    def report_outstanding(self, count: int) -> None:
        """Attempts in flight on it across the data-plane workers, as they last reported
        (in the control process, where no attempt runs)."""
        self.outstanding = count

    def _load_snapshot(self, now: float) -> dict[str, Any]:
        load = self.load
        if load is None:
            return {"reported_queue": None, "reported_age_s": None, "reported_by": None}
        return {
            "reported_queue": load.queue,
            "reported_inflight": load.inflight,
            "reported_age_s": round(max(0.0, now - self.load_at), 3),
            "reported_by": load.source,
        }

    def carry_from(self, old: Replica) -> None:
        """Takes over what ``old`` (this replica, in the gateway a reload replaced) learned.

        Not ``outstanding``: ``old``'s attempts finish on ``old``.
        """
        for name in CARRIED:
            setattr(self, name, getattr(old, name))

    def snapshot(self, now: float) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "zone": self.zone,
            "standby": self.standby,
            "healthy": self.healthy,
            "breaker": self.breaker.snapshot() if self.breaker else None,
            "ejected": self.ejected(now),
            "ejected_for_s": round(max(0.0, self.ejected_until - now), 3),
            "ejections": self.ejections,
            "ejection_reason": self.ejection_reason,
            "quarantined": self.quarantined_until > now,
            "quarantined_for_s": round(max(0.0, self.quarantined_until - now), 3),
            "quarantine_reason": self.quarantine_reason,
            "golden_last": self.golden_last,
            "outstanding": self.outstanding,
            "weight": self.weight,
            **self._load_snapshot(now),
            "ewma_latency_ms": round(self.ewma_latency_s * 1000, 3),
            "requests": self.requests,
            "failures": self.failures,
            "consecutive_failures": self.consecutive_failures,
            "last_error": self.last_error,
        }

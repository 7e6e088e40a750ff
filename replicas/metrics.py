"""Prometheus metrics of one replica, in a registry of its own.

A private `CollectorRegistry` keeps these series apart from anything else imported into the
process (the gateway's own metrics, in-process test servers), so two apps never collide on a
metric name. Label children are cached so the per-request cost is a dict lookup and an add.
Every series names the model it serves by ``model`` and ``version`` (Triton's labels), so a
replica's series join the gateway's replica series (``gateway_replica_*{model=...}``).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from replicas.load import ReplicaLoad
from v2proto.load import INFLIGHT_METRIC, PENDING_METRIC

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ReplicaMetrics:
    """Infer request counts, latency, rows, readiness and active faults for one model, and
    its load: requests in flight and waiting (read from ``load`` at scrape time, under
    Triton's name for the waiting ones, so a gateway scrapes a replica as it would Triton)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, model: str, version: str = "1", load: ReplicaLoad | None = None) -> None:
        self.model = model
        self.version = version
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model", "version"]
        self._requests = Counter(
            "replica_requests",
            "Infer requests answered, by HTTP status code.",
            [*labels, "code"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "replica_request_duration_seconds",
            "Time from receiving an infer request to answering it.",
            labels,
            buckets=BUCKETS,
            registry=self.registry,
        ).labels(model, version)
        self._rows = Counter(
            "replica_inference_rows",
            "Rows (batch items) inferred successfully.",
            labels,
            registry=self.registry,
        ).labels(model, version)
        self.load = load or ReplicaLoad(threads=1)
        Gauge(
            INFLIGHT_METRIC,
            "Infer requests received and not yet answered.",
            labels,
            registry=self.registry,
        ).labels(model, version).set_function(lambda: self.load.inflight)
        Gauge(
            PENDING_METRIC,
            "Infer requests waiting for an inference thread (Triton's name).",
            labels,
            registry=self.registry,
        ).labels(model, version).set_function(lambda: self.load.queue)
        self._ready = Gauge(
            "replica_ready", "1 when the replica reports ready.", labels, registry=self.registry
        ).labels(model, version)
        self._faults = Gauge(
            "replica_faults_active",
            "1 for each injected fault that is on.",
            [*labels, "fault"],
            registry=self.registry,
        )
        self._by_code: dict[int, Counter] = {}

    def observe(self, code: int, seconds: float, rows: int = 0) -> None:
        child = self._by_code.get(code)
        if child is None:
            child = self._by_code[code] = self._requests.labels(self.model, self.version, str(code))
        child.inc()
        self._duration.observe(seconds)
        if rows:
            self._rows.inc(rows)

    def set_ready(self, ready: bool) -> None:
        self._ready.set(1 if ready else 0)

    def set_faults(self, active: Mapping[str, bool]) -> None:
        for fault, on in active.items():
            self._faults.labels(self.model, self.version, fault).set(1 if on else 0)

    def render(self, names: frozenset[str] | None = None) -> bytes:
        """The exposition; with ``names``, only the series of those names."""
        if names is None:
            return generate_latest(self.registry)
        return generate_latest(self.registry.restricted_registry(sorted(names)))

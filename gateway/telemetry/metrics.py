"""The gateway's Prometheus metrics: one `Metrics` object the pipeline calls, and ``render()``.

The per-request calls (`request`, `queued`, `attempt`) are on the hot path
(loadtests/bench_telemetry.py measures them): their series are cached by the raw values the
pipeline already holds, so the hot path does one dict lookup and no string formatting. Labels
that the config bounds (a model's version, a replica's pool and model) come from a `Topology`.
Free-text labels (reasons, tallies) are bounded so that a bug or a hostile input cannot grow the
series without end; so is the tenant label: configured tenants and "anonymous" only
(`ANONYMOUS`, which the tenant config uses too).
Names live in `catalog`. Record from the loop thread only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder

from gateway.outcome import Outcome, OutcomeKind
from gateway.telemetry.catalog import BREAKER_STATES, LATENCY_BUCKETS, Catalog
from gateway.telemetry.rollout_metrics import set_rollouts
from gateway.telemetry.series import Buckets, FamilyCollector, Value
from gateway.telemetry.slo_metrics import set_slos
from gateway.telemetry.topology import Topology

# pass this for requests naming a model that is not configured
UNKNOWN_MODEL = "_unknown"
# served_by when no replica or fallback answered (shed, 404, 504 ...)
NOBODY = "none"
# distinct values per free-text label before they become "other"
MAX_LABEL_VALUES = 64
# the tenant of a request with no API key, and every unknown tenant
ANONYMOUS = "anonymous"
_LABEL_VALUE = re.compile(r"[A-Za-z0-9_./:-]{1,64}")
# model, route, status, served_by, tenant
RequestKey = tuple[str, str, int, str, str]


class RequestMetrics(Protocol):
    """What the request path reports (`Metrics` is one; a data-plane worker ships the same
    calls to its control process, `gateway.worker.shipped.ShippedMetrics`)."""

    def queued(self, model: str, seconds: float) -> None: ...

    def attempt(self, model: str, pool: str, outcome: Outcome) -> None: ...

    def retry(self, model: str) -> None: ...

    def retry_refused(self, model: str) -> None: ...

    def hedge(self, model: str, won: bool) -> None: ...

    def shed(self, model: str, reason: str = "in_flight_limit") -> None: ...

    def per_try_timeout(self, model: str, pool: str, replica: str) -> None: ...

    def vote(self, model: str, tally: str, dissenters: Iterable[str] = ()) -> None: ...

    def fallback(self, model: str, reason: str) -> None: ...


class BoundedLabel:
    """Maps free text to a label value: short, well-formed and at most ``limit`` distinct.

    Bounded by count: it remembers at most ``limit`` values; every other becomes ``other``.
    """

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._seen: set[str] = set()
        self._limit = limit

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit or not _LABEL_VALUE.fullmatch(value):
            return "other"
        self._seen.add(value)
        return value


class ModelCells:
    """A model's per-request histograms that are labelled by the model alone."""

    __slots__ = ("queue", "request_size", "response_size", "rows")

    def __init__(self, catalog: Catalog, model: str, version: str) -> None:
        self.queue = catalog.queue.labels(model, version)
        self.request_size = catalog.request_size.labels(model, version)
        self.response_size = catalog.response_size.labels(model, version)
        self.rows = catalog.rows.labels(model, version)


def breaker_state_label(state: str) -> str:
    """The breaker's own name for a state as a `catalog.BREAKER_STATES` label value."""
    return state.replace("-", "_")


class Metrics:
    def __init__(
        self,
        buckets: Iterable[float] = LATENCY_BUCKETS,
        *,
        process: bool = True,
        tenants: Iterable[str] = (),
        topology: Topology | None = None,
    ) -> None:
        """``tenants``: the configured tenant names, the only tenant labels besides ANONYMOUS;
        ``topology``: the configured models, pools and replicas (labels bounded by config)."""
        self.registry = CollectorRegistry()
        self._tenants = frozenset((*tenants, ANONYMOUS))
        self._topology = topology or Topology()
        self.catalog = self._m = Catalog(buckets)
        self._hooks: list[Callable[[], None]] = []
        self._reason = BoundedLabel()
        self._tally = BoundedLabel()
        self._request_cells: dict[RequestKey, tuple[Value, Buckets, ModelCells]] = {}
        self._model_cells: dict[str, ModelCells] = {}
        self._attempt_cells: dict[tuple[str, str, str, OutcomeKind], tuple[Value, Buckets]] = {}
        self.registry.register(FamilyCollector(self._m.families, self._hooks))
        if process:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)

    # --- per request (hot path) ------------------------------------------------------------

    def request(
        self,
        model: str,
        route: str,
        status: int,
        served_by: str,
        latency_s: float,
        degraded_reason: str | None = None,
        tenant: str = ANONYMOUS,
        request_bytes: int = -1,
        response_bytes: int = -1,
        rows: int = -1,
    ) -> None:
        """One client-visible answer; ``route`` is "single", "vote" or "fallback".

        Sizes and ``rows`` are observed where known (-1: not known, as for a body never read,
        a request refused before parsing, or an error answer).
        """
        self.requests(
            model,
            route,
            status,
            served_by,
            degraded_reason,
            tenant,
            (latency_s,),
            (request_bytes,),
            (response_bytes,),
            (rows,),
        )

    def requests(
        self,
        model: str,
        route: str,
        status: int,
        served_by: str,
        degraded_reason: str | None,
        tenant: str,
        latencies_s: Sequence[float],
        request_bytes: Sequence[int],
        response_bytes: Sequence[int],
        rows: Sequence[int],
    ) -> None:
        """Answers alike in all but their latency, sizes and rows (one `request` each)."""
        if tenant not in self._tenants:
            tenant = ANONYMOUS
        key = (model, route, status, served_by, tenant)
        cells = self._request_cells.get(key)
        if cells is None:
            cells = self._request_cells[key] = self._new_request_cells(key)
        count, duration, per_model = cells
        count.value += len(latencies_s)
        duration.observe_all(latencies_s)
        for values, buckets in (
            (request_bytes, per_model.request_size),
            (response_bytes, per_model.response_size),
            (rows, per_model.rows),
        ):
            known = [v for v in values if v >= 0]
            if known:
                buckets.observe_all(known)
        if degraded_reason is not None:
            self._m.degraded.labels(model, self._reason(degraded_reason)).value += len(latencies_s)

    def queued(self, model: str, seconds: float) -> None:
        """Arrival to the first attempt's send, once per request (Triton's queue duration)."""
        cells = self._model_cells.get(model)
        if cells is None:
            cells = self._cells_of(model)
        cells.queue.observe(seconds)

    def queued_all(self, model: str, seconds: Sequence[float]) -> None:
        """`queued` for each of ``seconds`` (a worker's batch of them)."""
        self._cells_of(model).queue.observe_all(seconds)

    def attempt(self, model: str, pool: str, outcome: Outcome) -> None:
        """One classified upstream attempt (the same `Outcome` the breaker reads)."""
        cells = self._attempt_cells_of(model, pool, outcome.replica, outcome.kind)
        cells[0].value += 1
        cells[1].observe(outcome.latency_s)

    def successes(self, model: str, pool: str, replica: str, latencies_s: Sequence[float]) -> None:
        """`attempt` for successful attempts alike, one of each of ``latencies_s``."""
        cells = self._attempt_cells_of(model, pool, replica, OutcomeKind.SUCCESS)
        cells[0].value += len(latencies_s)
        cells[1].observe_all(latencies_s)

    def _attempt_cells_of(
        self, model: str, pool: str, replica: str, kind: OutcomeKind
    ) -> tuple[Value, Buckets]:
        key = (model, pool, replica, kind)
        cells = self._attempt_cells.get(key)
        if cells is None:
            labels = (model, pool, replica, kind.value)
            cells = (self._m.attempts.labels(*labels), self._m.attempt_duration.labels(*labels))
            self._attempt_cells[key] = cells
        return cells

    def in_flight(self, model: str, delta: int) -> None:
        self._m.in_flight.labels(model).value += delta

    def _new_request_cells(self, key: RequestKey) -> tuple[Value, Buckets, ModelCells]:
        model, route, status, served_by, tenant = key
        version = self._topology.version(model)
        code = str(status)
        count = self._m.requests.labels(model, version, route, code, served_by or NOBODY, tenant)
        duration = self._m.duration.labels(model, version, route, code)
        return count, duration, self._cells_of(model)

    def _cells_of(self, model: str) -> ModelCells:
        cells = self._model_cells.get(model)
        if cells is None:
            version = self._topology.version(model)
            cells = self._model_cells[model] = ModelCells(self._m, model, version)
        return cells

    # --- per event (retries, shedding, votes, fallbacks) --------------------------------------

    def retry(self, model: str) -> None:
        self._m.retries.labels(model).value += 1

    def retry_refused(self, model: str) -> None:
        self._m.retries_refused.labels(model).value += 1

    def hedge(self, model: str, won: bool) -> None:
        self._m.hedges.labels(model, "won" if won else "lost").value += 1

    def shed(self, model: str, reason: str = "in_flight_limit") -> None:
        self._m.shed.labels(model, self._reason(reason)).value += 1

    def per_try_timeout(self, model: str, pool: str, replica: str) -> None:
        """A try given up on after its per-try timeout (Envoy's upstream_rq_per_try_timeout)."""
        self._m.per_try_timeouts.labels(model, pool, replica).value += 1

    def vote(self, model: str, tally: str, dissenters: Iterable[str] = ()) -> None:
        """``tally`` like "3/3", "2/3" or "no_quorum"; each dissenting replica is counted."""
        self._m.votes.labels(model, self._tally(tally)).value += 1
        for replica in dissenters:
            _, pool, _ = self._topology.replica_labels(replica)
            self._m.dissents.labels(model, pool, replica).value += 1

    def fallback(self, model: str, reason: str) -> None:
        self._m.fallbacks.labels(model, self._reason(reason)).value += 1

    def audit(self, model: str, outcome: str) -> None:
        """One audit's outcome (`gateway.pipeline.audit.VERDICTS`, or ``shed_<why>``)."""
        self._m.audits.labels(model, self._reason(outcome)).value += 1

    def escalated(self, model: str, engaged: bool) -> None:
        self._m.escalated.labels(model).value = 1.0 if engaged else 0.0

    # --- state changes (rare) ----------------------------------------------------------------

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        """Fits `gateway.upstream.breaker.StateListener`: pass it as a breaker listener."""
        labels = self._topology.replica_labels(replica)
        old, new = breaker_state_label(old), breaker_state_label(new)
        self._m.transitions.labels(*labels, old, new).value += 1
        self.breaker_state(replica, new)

    def breaker_state(self, replica: str, state: str) -> None:
        """Sets the state set: 1 on ``state``'s series, 0 on the others (an unknown state: 0
        on all, so that a query for the known states never counts it)."""
        labels = self._topology.replica_labels(replica)
        state = breaker_state_label(state)
        for each in BREAKER_STATES:
            self._m.breaker.labels(*labels, each).set(1.0 if each == state else 0.0)

    def ejection(self, replica: str, reason: str) -> None:
        labels = self._topology.replica_labels(replica)
        self._m.ejections.labels(*labels, self._reason(reason)).value += 1

    def quarantine(self, replica: str, reason: str) -> None:
        labels = self._topology.replica_labels(replica)
        self._m.quarantines.labels(*labels, self._reason(reason)).value += 1

    def forget_replica(self, replica: str) -> None:
        """The replica left (DNS discovery, a reload): drop every series that names it.

        A replica's id carries its address when it was discovered, so with pod churn each
        departed one would leave its series behind for the life of the process (Prometheus
        marks a vanished series stale, as it does for a target that goes away). A replica that
        comes back starts its counters afresh, which ``rate()`` reads as a reset.
        """
        for family in self._m.families:
            for position, name in enumerate(family.labelnames):
                if name in ("replica", "served_by"):
                    for labels, _ in family.items():
                        if labels[position] == replica:
                            family.remove(*labels)
        for key in [k for k in self._attempt_cells if k[2] == replica]:
            del self._attempt_cells[key]
        for request_key in [k for k in self._request_cells if k[3] == replica]:
            del self._request_cells[request_key]
        self._topology.replicas.pop(replica, None)

    def state_store(self, degraded: bool) -> None:
        self._m.store.labels().set(1.0 if degraded else 0.0)

    def state_rejected(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Copies the shared state's counts of values dropped on reading back (`Rejects`)."""
        for (source, kind), count in counts.items():
            self._m.store_rejected.labels(source, kind).set(count)

    def local_resource_errors(self, counts: Mapping[str, int]) -> None:
        """Copies the process's count of its own resource errors, by errno
        (`gateway.upstream.transport.local_errors`)."""
        for name, count in counts.items():
            self._m.local_resource_errors.labels(name).set(count)

    def inflight_bytes(self, levels: tuple[int, int, int, int, int]) -> None:
        """The in-flight bytes' levels (`gateway.memory.inflight_bytes.BudgetLevels`: held,
        waiting, refused, reclaimed, limit), summed over the processes that serve requests."""
        held, waiting, refused, reclaimed, limit = levels
        m = self._m
        m.inflight_bytes.labels().set(held)
        m.inflight_limit.labels().set(limit)
        m.inflight_waiting.labels().set(waiting)
        m.inflight_refused.labels().set(refused)
        m.inflight_reclaimed.labels().set(reclaimed)

    def set_worker(
        self, worker: int, *, rss_bytes: int, cpu_s: float, stale: bool, restarts: int
    ) -> None:
        """One data-plane worker's levels as of its last batch (`gateway.control`)."""
        label = str(worker)
        self._m.worker_rss.labels(label).set(rss_bytes)
        self._m.worker_cpu.labels(label).set(cpu_s)
        self._m.worker_stale.labels(label).set(1.0 if stale else 0.0)
        self._m.worker_restarts.labels(label).set(restarts)

    def stale_answers(self, count: int) -> None:
        """Answers served on a stale snapshot, from the batches just taken in."""
        self._m.stale_answers.labels().value += count

    def admin_auth_failed(self, door: str, code: int) -> None:
        """One control-plane request refused for its key (`gateway.api.auth_failures`)."""
        self._m.admin_auth_failures.labels(door, str(code)).value += 1

    def set_slo(self, doc: Mapping[str, Any]) -> None:
        """Replaces the SLO gauges with the /slo document (shape in `set_slos`)."""
        set_slos(self._m.slo, doc)

    def set_rollouts(self, doc: Mapping[str, Any]) -> None:
        """Sets the rollout series from ``Rollouts.snapshot()`` (`set_rollouts`)."""
        set_rollouts(self._m.rollout, doc)

    # --- scrape-time state -------------------------------------------------------------------

    def on_scrape(self, hook: Callable[[], None]) -> None:
        """Runs ``hook`` before each scrape: copy state that is cheaper to read than to track."""
        self._hooks.append(hook)

    def set_in_flight(self, model: str, value: int) -> None:
        self._m.in_flight.labels(model).set(value)

    def set_retry_budget(self, balance: float) -> None:
        self._m.retry_budget.labels().set(balance)

    def set_replica(self, replica: str, *, healthy: bool, ejected: bool, outstanding: int) -> None:
        labels = self._topology.replica_labels(replica)
        self._m.healthy.labels(*labels).set(1.0 if healthy else 0.0)
        self._m.ejected.labels(*labels).set(1.0 if ejected else 0.0)
        self._m.outstanding.labels(*labels).set(outstanding)

    def set_ejections_active(self, pool: str, ejected: int) -> None:
        """Replicas of ``pool`` ejected now (Envoy's outlier_detection_ejections_active)."""
        self._m.ejections_active.labels(*self._topology.pool_labels(pool)).set(ejected)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition body and its content type (OpenMetrics if ``accept`` asks for it)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

"""The gateway's Prometheus metrics: one `Metrics` object the pipeline calls, and ``render()``.

The per-request calls (`request`, `attempt`) cost ≈ 0.3 µs each: their series are cached by
the raw values the pipeline already holds, so the hot path does one dict lookup and no string
formatting. Free-text labels (reasons, tallies) are bounded so that a bug or a hostile input
cannot grow the series without end; so is the tenant label: configured tenants and
"anonymous" only (`ANONYMOUS`, which the tenant config uses too). Names live in `catalog`.
Record from the loop thread only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder

from gateway.outcome import Outcome, OutcomeKind
from gateway.telemetry.catalog import LATENCY_BUCKETS, Catalog
from gateway.telemetry.series import Buckets, FamilyCollector, Value

BREAKER_STATES = {"closed": 0.0, "half-open": 1.0, "half_open": 1.0, "open": 2.0}
UNKNOWN_MODEL = "_unknown"  # pass this for requests naming a model that is not configured
NOBODY = "none"  # served_by when no replica or fallback answered (shed, 404, 504 ...)
MAX_LABEL_VALUES = 64  # distinct values per free-text label before they become "other"
ANONYMOUS = "anonymous"  # the tenant of a request with no API key, and every unknown tenant
_LABEL_VALUE = re.compile(r"[A-Za-z0-9_./:-]{1,64}")


class BoundedLabel:
    """Maps free text to a label value: short, well-formed and at most ``limit`` distinct."""

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


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status <= 599 else "other"


class Metrics:
    def __init__(
        self,
        buckets: Iterable[float] = LATENCY_BUCKETS,
        *,
        process: bool = True,
        tenants: Iterable[str] = (),
    ) -> None:
        """``tenants``: the configured tenant names, the only tenant labels besides ANONYMOUS."""
        self.registry = CollectorRegistry()
        self._tenants = frozenset((*tenants, ANONYMOUS))
        self.catalog = self._m = Catalog(buckets)
        self._hooks: list[Callable[[], None]] = []
        self._reason = BoundedLabel()
        self._tally = BoundedLabel()
        self._request_cells: dict[tuple[str, str, int, str, str], tuple[Value, Buckets]] = {}
        self._attempt_cells: dict[tuple[str, str, OutcomeKind], tuple[Value, Buckets]] = {}
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
    ) -> None:
        """One client-visible answer; ``route`` is "single", "vote" or "fallback"."""
        if tenant not in self._tenants:
            tenant = ANONYMOUS
        key = (model, route, status, served_by, tenant)
        cells = self._request_cells.get(key)
        if cells is None:
            cells = self._request_cells[key] = self._new_request_cells(key)
        cells[0].value += 1
        cells[1].observe(latency_s)
        if degraded_reason is not None:
            self._m.degraded.labels(model, self._reason(degraded_reason)).value += 1

    def attempt(self, model: str, outcome: Outcome) -> None:
        """One classified upstream attempt (the same `Outcome` the breaker reads)."""
        key = (model, outcome.replica, outcome.kind)
        cells = self._attempt_cells.get(key)
        if cells is None:
            labels = (model, outcome.replica, outcome.kind.value)
            cells = (self._m.attempts.labels(*labels), self._m.attempt_duration.labels(*labels))
            self._attempt_cells[key] = cells
        cells[0].value += 1
        cells[1].observe(outcome.latency_s)

    def in_flight(self, model: str, delta: int) -> None:
        self._m.in_flight.labels(model).value += delta

    def _new_request_cells(self, key: tuple[str, str, int, str, str]) -> tuple[Value, Buckets]:
        model, route, status, served_by, tenant = key
        klass = status_class(status)
        labels = (model, route, str(status), klass, served_by or NOBODY, tenant)
        count = self._m.requests.labels(*labels)
        return count, self._m.duration.labels(model, route, klass)

    # --- per event (retries, shedding, votes, fallbacks) --------------------------------------

    def retry(self, model: str) -> None:
        self._m.retries.labels(model).value += 1

    def retry_refused(self, model: str) -> None:
        self._m.retries_refused.labels(model).value += 1

    def hedge(self, model: str, won: bool) -> None:
        self._m.hedges.labels(model, "won" if won else "lost").value += 1

    def shed(self, model: str, reason: str = "in_flight_limit") -> None:
        self._m.shed.labels(model, self._reason(reason)).value += 1

    def vote(self, model: str, tally: str, dissenters: Iterable[str] = ()) -> None:
        """``tally`` like "3/3", "2/3" or "no_quorum"; each dissenting replica is counted."""
        self._m.votes.labels(model, self._tally(tally)).value += 1
        for replica in dissenters:
            self._m.dissents.labels(model, replica).value += 1

    def fallback(self, model: str, reason: str) -> None:
        self._m.fallbacks.labels(model, self._reason(reason)).value += 1

    # --- state changes (rare) ----------------------------------------------------------------

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        """Fits `gateway.upstream.breaker.StateListener`: pass it as a breaker listener."""
        self._m.transitions.labels(replica, old, new).value += 1
        self.breaker_state(replica, new)

    def breaker_state(self, replica: str, state: str) -> None:
        self._m.breaker.labels(replica).set(BREAKER_STATES.get(state, -1.0))

    def ejection(self, replica: str, reason: str) -> None:
        self._m.ejections.labels(replica, self._reason(reason)).value += 1

    def quarantine(self, replica: str, reason: str) -> None:
        self._m.quarantines.labels(replica, self._reason(reason)).value += 1

    def state_store(self, degraded: bool) -> None:
        self._m.store.labels().set(1.0 if degraded else 0.0)

    def set_slo(self, doc: Mapping[str, Any]) -> None:
        """Replaces the SLO gauges with the /slo document (shape in `SloMetrics.update`)."""
        self._m.slo.update(doc)

    # --- scrape-time state -------------------------------------------------------------------

    def on_scrape(self, hook: Callable[[], None]) -> None:
        """Runs ``hook`` before each scrape: copy state that is cheaper to read than to track."""
        self._hooks.append(hook)

    def set_in_flight(self, model: str, value: int) -> None:
        self._m.in_flight.labels(model).set(value)

    def set_retry_budget(self, balance: float) -> None:
        self._m.budget.labels().set(balance)

    def set_replica(self, replica: str, *, healthy: bool, ejected: bool, outstanding: int) -> None:
        self._m.healthy.labels(replica).set(1.0 if healthy else 0.0)
        self._m.ejected.labels(replica).set(1.0 if ejected else 0.0)
        self._m.outstanding.labels(replica).set(outstanding)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition body and its content type (OpenMetrics if ``accept`` asks for it)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

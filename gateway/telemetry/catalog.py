"""Every metric the gateway exports: name, help text, labels and buckets, in one place.

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` histograms in base
units); an operator reading this file sees all of /metrics. `Metrics` records into these.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway import __version__
from gateway.telemetry.series import CounterFamily, Family, GaugeFamily, HistogramFamily
from gateway.telemetry.slo_metrics import SloMetrics

# Local inference answers in ≈ 0.3-5 ms; deadlines reach seconds.
LATENCY_BUCKETS = (
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class Catalog:
    def __init__(self, buckets: Iterable[float] = LATENCY_BUCKETS) -> None:
        bounds = tuple(buckets)
        self.requests = CounterFamily(
            "gateway_requests_total",
            "Client requests answered, by model, route, status, who served them and tenant.",
            ("model", "route", "code", "status_class", "served_by", "tenant"),
        )
        self.duration = HistogramFamily(
            "gateway_request_duration_seconds",
            "Latency as the client saw it, from arrival to the answer.",
            ("model", "route", "status_class"),
            bounds,
        )
        self.degraded = CounterFamily(
            "gateway_degraded_responses_total",
            "Answers sent with x-degraded, by reason.",
            ("model", "reason"),
        )
        self.attempts = CounterFamily(
            "gateway_upstream_attempts_total",
            "Upstream attempts by replica and classified outcome.",
            ("model", "replica", "outcome"),
        )
        self.attempt_duration = HistogramFamily(
            "gateway_upstream_attempt_duration_seconds",
            "Latency of each upstream attempt, by replica and outcome.",
            ("model", "replica", "outcome"),
            bounds,
        )
        self.retries = CounterFamily("gateway_retries_total", "Retries sent.", ("model",))
        self.retries_refused = CounterFamily(
            "gateway_retries_refused_total",
            "Retries not sent because the retry budget was spent.",
            ("model",),
        )
        self.budget = GaugeFamily("gateway_retry_budget_balance", "Retries the budget allows now.")
        self.hedges = CounterFamily(
            "gateway_hedges_total",
            "Hedged requests, by whether the hedge won.",
            ("model", "result"),
        )
        self.shed = CounterFamily(
            "gateway_shed_requests_total",
            "Requests shed by admission control.",
            ("model", "reason"),
        )
        self.in_flight = GaugeFamily(
            "gateway_in_flight_requests", "Requests being served now.", ("model",)
        )
        self.breaker = GaugeFamily(
            "gateway_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
            ("replica",),
        )
        self.transitions = CounterFamily(
            "gateway_breaker_transitions_total",
            "Circuit breaker state changes.",
            ("replica", "from", "to"),
        )
        self.ejections = CounterFamily(
            "gateway_ejections_total", "Outlier ejections of a replica.", ("replica", "reason")
        )
        self.ejected = GaugeFamily(
            "gateway_replica_ejected", "1 while a replica is ejected.", ("replica",)
        )
        self.healthy = GaugeFamily(
            "gateway_replica_healthy", "1 while active health checks pass.", ("replica",)
        )
        self.outstanding = GaugeFamily(
            "gateway_replica_outstanding_requests", "Requests in flight to a replica.", ("replica",)
        )
        self.votes = CounterFamily(
            "gateway_votes_total", "N-version votes, by tally (agreeing/legs).", ("model", "tally")
        )
        self.dissents = CounterFamily(
            "gateway_vote_dissents_total",
            "Vote legs that disagreed with the quorum.",
            ("model", "replica"),
        )
        self.quarantines = CounterFamily(
            "gateway_quarantines_total",
            "Replicas quarantined for wrong answers.",
            ("replica", "reason"),
        )
        self.fallbacks = CounterFamily(
            "gateway_fallbacks_total",
            "Requests answered by the fallback model.",
            ("model", "reason"),
        )
        self.store = GaugeFamily(
            "gateway_state_store_degraded",
            "1 while the shared state store is unreachable (serving on local state).",
        )
        self.info = GaugeFamily("gateway_build_info", "Gateway version; always 1.", ("version",))
        self.info.labels(__version__).set(1)
        self.slo = SloMetrics()

    @property
    def families(self) -> list[Family]:
        return [f for f in vars(self).values() if isinstance(f, Family)] + list(self.slo.families)

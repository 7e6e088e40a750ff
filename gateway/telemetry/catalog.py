"""Every metric the gateway exports: name, help text, labels and buckets, in one place.

Names follow Prometheus conventions (``_total`` counters, base units: ``_seconds``,
``_bytes``); an operator reading this file sees all of /metrics. `Metrics` records into these.
Label vocabulary, the same everywhere: ``model`` and ``version`` on request series are the
model the client called; on replica series (``pool``, ``model``, ``replica``) they are the
model the replica serves (its pool's). ``code`` is the HTTP status (Prometheus' name for it;
a status class is ``code=~"5.."`` in a query, not a second label).
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway import __version__
from gateway.telemetry.series import CounterFamily, Family, GaugeFamily, HistogramFamily

# Local inference answers in well under a second; deadlines reach seconds.
LATENCY_BUCKETS = (
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
# Queue time at the edge is parsing and admission: tens of µs, ms under load.
QUEUE_BUCKETS = (
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1,
    1.0,
)  # fmt: skip
# Payloads from a one-row JSON request (≈ 500 B) to the body limit (tens of MiB): powers of 4.
# 256 B ... 64 MiB
BYTES_BUCKETS = tuple(float(256 * 4**i) for i in range(10))
ROWS_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0)
# the state set of gateway_breaker_state
BREAKER_STATES = ("closed", "open", "half_open")
# the labels of every replica series
REPLICA = ("model", "pool", "replica")
# the labels naming one SLO
SLO = ("model", "slo", "tenant")
# the labels naming one rollout
ROLLOUT = ("model", "candidate")
ROLLOUT_PHASES = ("waiting", "shadow", "canary", "paused", "rolled_back", "promoted", "aborted")


class Catalog:
    def __init__(self, buckets: Iterable[float] = LATENCY_BUCKETS) -> None:
        bounds = tuple(buckets)
        # --- per request, at the edge (Triton: nv_inference_*) ---------------------------
        self.requests = CounterFamily(
            "gateway_requests_total",
            "Client requests answered, by model, route, status code, who served them and tenant.",
            ("model", "version", "route", "code", "served_by", "tenant"),
        )
        self.duration = HistogramFamily(
            "gateway_request_duration_seconds",
            "Latency as the client saw it, from arrival to the answer.",
            ("model", "version", "route", "code"),
            bounds,
        )
        self.queue = HistogramFamily(
            "gateway_request_queue_duration_seconds",
            "Time from arrival to the first upstream attempt's send (reading, parsing, admission).",
            ("model", "version"),
            QUEUE_BUCKETS,
        )
        self.request_size = HistogramFamily(
            "gateway_request_size_bytes",
            "Body of each accepted infer request, as received.",
            ("model", "version"),
            BYTES_BUCKETS,
        )
        self.response_size = HistogramFamily(
            "gateway_response_size_bytes",
            "Body of each infer answer sent by a replica or the fallback, as sent.",
            ("model", "version"),
            BYTES_BUCKETS,
        )
        self.rows = HistogramFamily(
            "gateway_request_batch_rows",
            "Rows (batch size) of each accepted infer request: its first input's first dimension.",
            ("model", "version"),
            ROWS_BUCKETS,
        )
        self.degraded = CounterFamily(
            "gateway_degraded_responses_total",
            "Answers sent with x-degraded, by reason.",
            ("model", "reason"),
        )
        # --- per upstream attempt (Envoy: cluster.upstream_rq_*) ---------------------------
        self.attempts = CounterFamily(
            "gateway_upstream_attempts_total",
            "Upstream attempts by replica and classified outcome.",
            ("model", "pool", "replica", "outcome"),
        )
        self.attempt_duration = HistogramFamily(
            "gateway_upstream_attempt_duration_seconds",
            "Latency of each upstream exchange, from send to its classified end.",
            ("model", "pool", "replica", "outcome"),
            bounds,
        )
        self.per_try_timeouts = CounterFamily(
            "gateway_upstream_per_try_timeouts_total",
            "Attempts given up on after the per-try timeout and retried (the exchange runs on).",
            ("model", "pool", "replica"),
        )
        self.retries = CounterFamily("gateway_retries_total", "Retries sent.", ("model",))
        self.retries_refused = CounterFamily(
            "gateway_retries_refused_total",
            "Retries not sent because the retry budget was spent.",
            ("model",),
        )
        self.retry_budget = GaugeFamily(
            "gateway_retry_budget_balance", "Retries the budget allows now."
        )
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
        # --- per replica and pool ----------------------------------------------------------
        self.breaker = GaugeFamily(
            "gateway_breaker_state",
            "Circuit breaker state as a state set: 1 for the replica's current state, else 0.",
            (*REPLICA, "state"),
        )
        self.transitions = CounterFamily(
            "gateway_breaker_transitions_total",
            "Circuit breaker state changes.",
            (*REPLICA, "from", "to"),
        )
        self.ejections = CounterFamily(
            "gateway_ejections_total", "Outlier ejections of a replica.", (*REPLICA, "reason")
        )
        self.ejections_active = GaugeFamily(
            "gateway_outlier_ejections_active",
            "Replicas of a pool ejected by outlier detection now.",
            ("model", "pool"),
        )
        self.ejected = GaugeFamily(
            "gateway_replica_ejected", "1 while a replica is ejected.", REPLICA
        )
        self.healthy = GaugeFamily(
            "gateway_replica_healthy", "1 while active health checks pass.", REPLICA
        )
        self.outstanding = GaugeFamily(
            "gateway_replica_outstanding_requests", "Requests in flight to a replica.", REPLICA
        )
        self.quarantines = CounterFamily(
            "gateway_quarantines_total",
            "Replicas quarantined for wrong answers.",
            (*REPLICA, "reason"),
        )
        # --- routes: votes and fallbacks ----------------------------------------------------
        self.votes = CounterFamily(
            "gateway_votes_total", "N-version votes, by tally (agreeing/legs).", ("model", "tally")
        )
        self.dissents = CounterFamily(
            "gateway_vote_dissents_total",
            "Vote legs that disagreed with the quorum (model: the voting model).",
            ("model", "pool", "replica"),
        )
        self.audits = CounterFamily(
            "gateway_audits_total",
            "Audits of single-route answers, by outcome: agreed, wrong (the client's answer, by "
            "a third opinion), auditor_wrong, undecided, failed (no audit answer), or shed_* "
            "(drawn, not sent: shed_load, shed_concurrency, shed_rate).",
            ("model", "outcome"),
        )
        self.escalated = GaugeFamily(
            "gateway_model_escalated",
            "1 while the burn policy serves a single-route model by a vote (its correctness "
            "SLO burns).",
            ("model",),
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
        self.store_rejected = CounterFamily(
            "gateway_state_rejected_total",
            "Values read back from the state store or the decisions file that failed their "
            "bounds and were dropped, by source (redis, decisions_file, store: refused once "
            "decoded) and kind (signal, counter, decision, heartbeat, key, seq, oversized, "
            "progress, capped).",
            ("source", "kind"),
        )
        self.local_resource_errors = CounterFamily(
            "gateway_local_resource_errors_total",
            "Connects to and reads from replicas that failed for the gateway's own shortage, by "
            "errno (EMFILE, ENFILE: file descriptors; ENOBUFS: socket buffers; ENOMEM: "
            "memory); charged to no replica.",
            ("errno",),
        )
        self.inflight_bytes = GaugeFamily(
            "gateway_inflight_bytes",
            "Bytes of request and answer bodies the gateway holds now, against "
            "server.inflight_bytes (gateway_inflight_bytes_limit).",
        )
        self.inflight_limit = GaugeFamily(
            "gateway_inflight_bytes_limit",
            "The in-flight bytes' limit: server.inflight_bytes, or the machine's default.",
        )
        self.inflight_waiting = GaugeFamily(
            "gateway_inflight_waiting_requests",
            "Requests waiting now for room in the in-flight bytes (at most "
            "server.inflight_wait_s each).",
        )
        self.inflight_refused = CounterFamily(
            "gateway_inflight_refused_total",
            "Requests answered 503 because no room came in the in-flight bytes within "
            "server.inflight_wait_s (a worker replaced starts again from 0).",
        )
        self.inflight_reclaimed = CounterFamily(
            "gateway_inflight_reclaimed_total",
            "Room lent to gRPC reads taken back for another client that had to wait (the "
            "read refused with RESOURCE_EXHAUSTED).",
        )
        self.admin_auth_failures = CounterFamily(
            "gateway_admin_auth_failures_total",
            "Requests to the control plane refused for a missing or wrong key, by door (admin, "
            "metrics) and how they were answered (401; 429 while the address is held back).",
            ("door", "code"),
        )
        # --- the data-plane workers (a control process's) ------------------------------------
        self.worker_rss = GaugeFamily(
            "gateway_worker_resident_memory_bytes",
            "Each data-plane worker's resident memory, as of its last batch.",
            ("worker",),
        )
        self.worker_cpu = GaugeFamily(
            "gateway_worker_cpu_seconds",
            "Each data-plane worker's CPU time since it started (a counter in all but type: "
            "a replaced worker starts again from 0), as of its last batch.",
            ("worker",),
        )
        self.worker_stale = GaugeFamily(
            "gateway_worker_snapshot_stale",
            "1 while a worker serves on a snapshot older than its staleness bound (its "
            "control process did not answer), as of its last batch.",
            ("worker",),
        )
        self.worker_restarts = GaugeFamily(
            "gateway_worker_restarts",
            "Times each worker's process was replaced since the gateway started.",
            ("worker",),
        )
        self.stale_answers = CounterFamily(
            "gateway_stale_snapshot_answers_total",
            "Answers a worker served while its snapshot was stale (counted when its batches "
            "reach the control process).",
            (),
        )
        self.info = GaugeFamily("gateway_build_info", "Gateway version; always 1.", ("version",))
        self.info.labels(__version__).set(1)
        # gateway_slo_*: objective, budget, burn, alerts, events
        self.slo = SloFamilies()
        # gateway_rollout_*: comparisons, share, phase
        self.rollout = RolloutFamilies()

    @property
    def families(self) -> list[Family]:
        families = [f for f in vars(self).values() if isinstance(f, Family)]
        return families + list(self.slo.families) + list(self.rollout.families)


class SloFamilies:
    """The SLO series, set at scrape time from the /slo document (`slo_metrics.set_slos`)."""

    def __init__(self) -> None:
        self.objective = GaugeFamily(
            "gateway_slo_objective", "Target fraction of good events.", SLO
        )
        self.error_budget = GaugeFamily(
            "gateway_slo_error_budget_remaining",
            "Fraction of the error budget left in the SLO period (negative when overspent).",
            SLO,
        )
        self.burn = GaugeFamily(
            "gateway_slo_burn_rate",
            "Error budget burn rate over a window (1 spends the budget exactly in the period).",
            (*SLO, "window"),
        )
        self.alert = GaugeFamily(
            "gateway_slo_alert_firing", "1 while a burn-rate alert fires.", (*SLO, "severity")
        )
        # The SLI as counters (this instance's events since start): what Prometheus rules sum
        # over every gateway instance. The request series cannot give it: a latency SLO's
        # threshold needs not be a histogram bucket, and short-deadline requests are excluded.
        self.events = CounterFamily(
            "gateway_slo_events_total",
            "Events an SLO counted on this instance (requests under its min deadline excluded).",
            SLO,
        )
        self.bad_events = CounterFamily(
            "gateway_slo_bad_events_total",
            "Bad events of an SLO on this instance: a 5xx, or for latency SLOs a late answer.",
            SLO,
        )
        self.wrong_rate = GaugeFamily(
            "gateway_slo_wrong_rate_bound",
            "A correctness SLO's wrong-answer rate over its period: the bounds of its 95 % "
            "interval (bound: low, high), from the answers it judged.",
            (*SLO, "bound"),
        )
        self.families = (
            self.objective,
            self.error_budget,
            self.burn,
            self.alert,
            self.events,
            self.bad_events,
            self.wrong_rate,
        )


class RolloutFamilies:
    """The rollout series, set at scrape time from `/admin/rollouts` (`rollout_metrics`)."""

    def __init__(self) -> None:
        self.comparisons = CounterFamily(
            "gateway_rollout_comparisons_total",
            "Shadow comparisons of the candidate's and the pool's answers, by result.",
            (*ROLLOUT, "result"),
        )
        self.disagreements = CounterFamily(
            "gateway_rollout_disagreements_total",
            "Compared answers whose output differed (beyond the vote's tolerance), by output.",
            (*ROLLOUT, "output"),
        )
        self.copies = CounterFamily(
            "gateway_rollout_copies_total",
            "Shadow copies not compared, by why: failed (no comparable answer) or shed.",
            (*ROLLOUT, "outcome"),
        )
        self.candidate = CounterFamily(
            "gateway_rollout_candidate_requests_total",
            "Requests the candidate took (canary: served; shadow: copies), by result.",
            (*ROLLOUT, "result"),
        )
        self.share = GaugeFamily(
            "gateway_rollout_share_percent",
            "Percent of the model's requests the candidate serves now.",
            ROLLOUT,
        )
        self.phase = GaugeFamily(
            "gateway_rollout_phase", "1 for the rollout's phase now.", (*ROLLOUT, "phase")
        )
        self.families = (
            self.comparisons,
            self.disagreements,
            self.copies,
            self.candidate,
            self.share,
            self.phase,
        )

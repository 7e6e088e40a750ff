from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gateway.faults.classify import classify_status
from gateway.outcome import Outcome, OutcomeKind
from gateway.telemetry.catalog import LATENCY_BUCKETS
from gateway.telemetry.metrics import MAX_LABEL_VALUES, Metrics
from gateway.telemetry.topology import Topology

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(metrics: Metrics) -> Samples:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


TOPOLOGY = Topology(
    models={"digits": "1", "digits-vote": "2"},
    pools={"mlp": "digits-mlp", "svm": "digits-svm"},
    replicas={"r1": "mlp", "r2": "mlp", "r3": "svm"},
)


def test_requests_are_counted_by_model_version_route_code_and_served_by() -> None:
    m = Metrics(process=False, topology=TOPOLOGY)
    m.request("digits", "single", 200, "r1", 0.003)
    m.request("digits", "single", 200, "r1", 0.004)
    m.request("digits", "vote", 200, "r2", 0.010)
    m.request("digits", "single", 503, "", 0.2, degraded_reason="no_replica")
    m.request("nope", "none", 404, "", 0.001)  # a model the config does not name: no version
    s = scrape(m)
    common = {"model": "digits", "version": "1", "route": "single", "tenant": "anonymous"}
    assert value(s, "gateway_requests_total", code="200", served_by="r1", **common) == 2
    assert value(s, "gateway_requests_total", code="503", served_by="none", **common) == 1
    assert value(s, "gateway_degraded_responses_total", model="digits", reason="no_replica") == 1
    unknown = {"model": "nope", "version": "", "route": "none", "tenant": "anonymous"}
    assert value(s, "gateway_requests_total", code="404", served_by="none", **unknown) == 1
    assert not any("status_class" in dict(labels) for _, labels in s)  # `code` says it all


def test_request_latency_histogram_has_cumulative_buckets_count_and_sum() -> None:
    m = Metrics(process=False)
    for latency in (0.0009, 0.001, 0.003, 7.0, 99.0):
        m.request("digits", "single", 200, "r1", latency)
    s = scrape(m)
    labels = {"model": "digits", "version": "", "route": "single", "code": "200"}
    bucket = "gateway_request_duration_seconds_bucket"
    assert value(s, bucket, le="0.0005", **labels) == 0
    assert value(s, bucket, le="0.001", **labels) == 2  # "less or equal": 0.001 counts here
    assert value(s, bucket, le="0.005", **labels) == 3
    assert value(s, bucket, le="10.0", **labels) == 4
    assert value(s, bucket, le="+Inf", **labels) == 5
    assert value(s, "gateway_request_duration_seconds_count", **labels) == 5
    assert abs(value(s, "gateway_request_duration_seconds_sum", **labels) - 106.0049) < 1e-9  # type: ignore[operator]
    les = {dict(k)["le"] for n, k in s if n == bucket}
    assert len(les) == len(LATENCY_BUCKETS) + 1


def test_attempts_are_counted_and_timed_by_pool_replica_and_outcome() -> None:
    m = Metrics(process=False)
    m.attempt("digits", "mlp", classify_status("r1", 200, 0.002))
    m.attempt("digits", "mlp", classify_status("r1", 503, 0.001))
    m.attempt("digits", "mlp", Outcome(OutcomeKind.TIMEOUT, "r2", 0.5))
    m.per_try_timeout("digits", "mlp", "r2")
    s = scrape(m)
    r1 = {"model": "digits", "pool": "mlp", "replica": "r1"}
    assert value(s, "gateway_upstream_attempts_total", outcome="success", **r1) == 1
    assert value(s, "gateway_upstream_attempts_total", outcome="server_error", **r1) == 1
    r2 = {"model": "digits", "pool": "mlp", "replica": "r2"}
    assert value(s, "gateway_upstream_per_try_timeouts_total", **r2) == 1
    timeout = {**r2, "outcome": "timeout"}
    assert value(s, "gateway_upstream_attempt_duration_seconds_count", **timeout) == 1
    assert value(s, "gateway_upstream_attempt_duration_seconds_bucket", le="0.25", **timeout) == 0
    assert value(s, "gateway_upstream_attempt_duration_seconds_bucket", le="0.5", **timeout) == 1


def test_successes_and_waits_alike_count_as_each_alone_would() -> None:
    # a worker's batch of them (`successes`, `queued_all`) against one call each
    latencies = [0.0004, 0.002, 0.002, 0.03, 0.7, 12.0] * 7  # past the sorting threshold
    each, alike = Metrics(process=False), Metrics(process=False)
    for latency in latencies:
        each.attempt("digits", "mlp", Outcome(OutcomeKind.SUCCESS, "r1", latency))
        each.queued("digits", latency)
    alike.successes("digits", "mlp", "r1", latencies)
    alike.queued_all("digits", latencies)
    attempt_and_queue = ("gateway_upstream_attempt", "gateway_request_queue")
    mine = {k: v for k, v in scrape(alike).items() if k[0].startswith(attempt_and_queue)}
    theirs = {k: v for k, v in scrape(each).items() if k[0].startswith(attempt_and_queue)}
    assert len(mine) > 20
    assert mine.keys() == theirs.keys()
    for key, got in mine.items():
        assert abs(got - theirs[key]) <= 1e-12 * max(1.0, abs(got)), key


def test_queue_time_body_sizes_and_rows_are_histograms_by_model_and_version() -> None:
    m = Metrics(process=False, topology=TOPOLOGY)
    m.queued("digits", 0.00004)
    m.request("digits", "single", 200, "r1", 0.003, None, "anonymous", 700, 300, 1)
    m.request("digits", "single", 200, "r1", 0.003, request_bytes=70_000, rows=64)
    m.request("digits", "single", 400, "", 0.001, request_bytes=10)  # refused: no rows, no reply
    m.request("digits", "single", 413, "", 0.001)  # never read: nothing known
    s = scrape(m)
    model = {"model": "digits", "version": "1"}
    queue = "gateway_request_queue_duration_seconds"
    assert value(s, f"{queue}_bucket", le="2.5e-05", **model) == 0
    assert value(s, f"{queue}_bucket", le="5e-05", **model) == 1
    assert value(s, f"{queue}_count", **model) == 1
    size = "gateway_request_size_bytes"
    assert value(s, f"{size}_count", **model) == 3
    assert value(s, f"{size}_sum", **model) == 70_710
    assert value(s, f"{size}_bucket", le="256.0", **model) == 1
    assert value(s, f"{size}_bucket", le="1024.0", **model) == 2
    assert value(s, f"{size}_bucket", le="65536.0", **model) == 2
    assert value(s, f"{size}_bucket", le="262144.0", **model) == 3
    assert value(s, "gateway_response_size_bytes_count", **model) == 1
    assert value(s, "gateway_response_size_bytes_sum", **model) == 300
    rows = "gateway_request_batch_rows"
    assert value(s, f"{rows}_count", **model) == 2
    assert value(s, f"{rows}_bucket", le="1.0", **model) == 1
    assert value(s, f"{rows}_bucket", le="32.0", **model) == 1
    assert value(s, f"{rows}_bucket", le="64.0", **model) == 2


def test_replica_series_carry_pool_and_model_from_the_topology() -> None:
    m = Metrics(process=False, topology=TOPOLOGY)
    m.set_replica("r3", healthy=True, ejected=True, outstanding=2)
    m.ejection("r3", "consecutive_failures")
    m.quarantine("r1", "vote_dissent")
    m.set_ejections_active("svm", 1)
    m.set_ejections_active("mlp", 0)
    m.vote("digits-vote", "2/3", ["r3"])
    m.breaker_state("gone", "closed")  # a replica the config does not name: no pool, no model
    s = scrape(m)
    r3 = {"model": "digits-svm", "pool": "svm", "replica": "r3"}
    assert value(s, "gateway_replica_healthy", **r3) == 1
    assert value(s, "gateway_replica_ejected", **r3) == 1
    assert value(s, "gateway_replica_outstanding_requests", **r3) == 2
    assert value(s, "gateway_ejections_total", reason="consecutive_failures", **r3) == 1
    r1 = {"model": "digits-mlp", "pool": "mlp", "replica": "r1"}
    assert value(s, "gateway_quarantines_total", reason="vote_dissent", **r1) == 1
    assert value(s, "gateway_outlier_ejections_active", model="digits-svm", pool="svm") == 1
    assert value(s, "gateway_outlier_ejections_active", model="digits-mlp", pool="mlp") == 0
    dissent = {"model": "digits-vote", "pool": "svm", "replica": "r3"}
    assert value(s, "gateway_vote_dissents_total", **dissent) == 1
    unknown = {"model": "", "pool": "", "replica": "gone", "state": "closed"}
    assert value(s, "gateway_breaker_state", **unknown) == 1


def breaker_states(samples: Samples, replica: str) -> dict[str, float]:
    return {
        dict(labels)["state"]: v
        for (name, labels), v in samples.items()
        if name == "gateway_breaker_state" and dict(labels)["replica"] == replica
    }


def test_breaker_state_is_a_state_set_with_exactly_one_state_at_1() -> None:
    m = Metrics(process=False, topology=TOPOLOGY)
    m.breaker_state("r2", "closed")
    m.breaker_transition("r1", "closed", "open")
    m.breaker_transition("r1", "open", "half-open")  # the breaker's spelling, as a label value
    s = scrape(m)
    assert breaker_states(s, "r1") == {"closed": 0, "open": 0, "half_open": 1}
    assert breaker_states(s, "r2") == {"closed": 1, "open": 0, "half_open": 0}
    r1 = {"model": "digits-mlp", "pool": "mlp", "replica": "r1"}
    transitions = "gateway_breaker_transitions_total"
    assert value(s, transitions, **r1, **{"from": "closed", "to": "open"}) == 1
    assert value(s, transitions, **r1, **{"from": "open", "to": "half_open"}) == 1
    m.breaker_state("r1", "stuck")  # unknown: no known state is 1
    assert breaker_states(scrape(m), "r1") == {"closed": 0, "open": 0, "half_open": 0}


def test_events_have_conventional_names_and_labels() -> None:
    m = Metrics(process=False)
    m.retry("digits")
    m.retry_refused("digits")
    m.hedge("digits", won=True)
    m.hedge("digits", won=False)
    m.shed("digits")
    m.in_flight("digits", +1)
    m.in_flight("digits", +1)
    m.in_flight("digits", -1)
    m.breaker_transition("r1", "closed", "open")
    m.breaker_transition("r1", "open", "half-open")
    m.breaker_state("r2", "closed")
    m.ejection("r3", "consecutive_failures")
    m.vote("digits", "2/3", ["r2"])
    m.vote("digits", "no_quorum")
    m.fallback("digits", "no_quorum")
    m.quarantine("r2", "vote_dissent")
    m.state_store(degraded=True)
    m.set_retry_budget(12.5)
    m.set_replica("r1", healthy=True, ejected=False, outstanding=3)
    s = scrape(m)
    assert value(s, "gateway_retries_total", model="digits") == 1
    assert value(s, "gateway_retries_refused_total", model="digits") == 1
    assert value(s, "gateway_hedges_total", model="digits", result="won") == 1
    assert value(s, "gateway_hedges_total", model="digits", result="lost") == 1
    assert value(s, "gateway_shed_requests_total", model="digits", reason="in_flight_limit") == 1
    assert value(s, "gateway_in_flight_requests", model="digits") == 1
    r1, r2 = {"model": "", "pool": "", "replica": "r1"}, {"model": "", "pool": "", "replica": "r2"}
    assert value(s, "gateway_breaker_state", state="half_open", **r1) == 1
    assert value(s, "gateway_breaker_state", state="closed", **r2) == 1
    assert (
        value(s, "gateway_breaker_transitions_total", **r1, **{"from": "closed", "to": "open"}) == 1
    )
    r3 = {"model": "", "pool": "", "replica": "r3"}
    assert value(s, "gateway_ejections_total", reason="consecutive_failures", **r3) == 1
    assert value(s, "gateway_votes_total", model="digits", tally="2/3") == 1
    assert value(s, "gateway_votes_total", model="digits", tally="no_quorum") == 1
    assert value(s, "gateway_vote_dissents_total", model="digits", pool="", replica="r2") == 1
    assert value(s, "gateway_fallbacks_total", model="digits", reason="no_quorum") == 1
    assert value(s, "gateway_quarantines_total", reason="vote_dissent", **r2) == 1
    assert value(s, "gateway_state_store_degraded") == 1
    assert value(s, "gateway_retry_budget_balance") == 12.5
    assert value(s, "gateway_replica_healthy", **r1) == 1
    assert value(s, "gateway_replica_ejected", **r1) == 0
    assert value(s, "gateway_replica_outstanding_requests", **r1) == 3
    assert value(s, "gateway_build_info", version=__import__("gateway").__version__) == 1


def test_breaker_transition_fits_the_breaker_listener_signature() -> None:
    from gateway.upstream.breaker import StateListener

    listener: StateListener = Metrics(process=False).breaker_transition
    listener("r1", "closed", "open")


def test_free_text_labels_are_bounded() -> None:
    m = Metrics(process=False)
    m.ejection("r1", "3 consecutive failures: r1 answered 503")  # free text: not a label value
    for i in range(MAX_LABEL_VALUES + 10):
        m.fallback("digits", f"reason_{i}")
    s = scrape(m)
    r1 = {"model": "", "pool": "", "replica": "r1"}
    assert value(s, "gateway_ejections_total", reason="other", **r1) == 1
    reasons = {dict(k)["reason"] for n, k in s if n == "gateway_fallbacks_total"}
    assert len(reasons) == MAX_LABEL_VALUES + 1 and "other" in reasons


def test_slo_document_sets_budget_burn_rates_and_alerts_and_replaces_old_ones() -> None:
    m = Metrics(process=False)
    m.set_slo(
        {
            "slos": [
                {
                    "name": "avail",
                    "model": "digits",
                    "tenant": None,
                    "objective": 0.999,
                    "budget_remaining": 0.25,
                    "burn_rates": {"5m": 14.4, "1h": 2.0},
                    "alerts": {"page": True, "ticket": False},
                },
                {"name": "avail", "model": "digits", "tenant": "acme", "budget_remaining": 0.5},
                {"name": "old", "model": "digits", "budget_remaining": 1.0},
            ]
        }
    )
    s = scrape(m)
    avail = {"model": "digits", "slo": "avail", "tenant": ""}
    assert value(s, "gateway_slo_objective", **avail) == 0.999
    assert value(s, "gateway_slo_error_budget_remaining", **avail) == 0.25
    acme = {**avail, "tenant": "acme"}
    assert value(s, "gateway_slo_error_budget_remaining", **acme) == 0.5
    assert value(s, "gateway_slo_burn_rate", window="5m", **avail) == 14.4
    assert value(s, "gateway_slo_burn_rate", window="1h", **avail) == 2.0
    assert value(s, "gateway_slo_alert_firing", severity="page", **avail) == 1
    assert value(s, "gateway_slo_alert_firing", severity="ticket", **avail) == 0
    # The other accepted shapes: slos by name, lists of windows and alerts.
    m.set_slo(
        {
            "slos": {
                "avail": {
                    "model": "digits",
                    "budget_remaining": -0.5,
                    "burn_rates": [{"window": "5m", "burn_rate": 20}],
                    "alerts": [{"severity": "page", "firing": False}],
                }
            }
        }
    )
    s = scrape(m)
    assert value(s, "gateway_slo_error_budget_remaining", **avail) == -0.5
    assert value(s, "gateway_slo_burn_rate", window="5m", **avail) == 20
    assert value(s, "gateway_slo_burn_rate", window="1h", **avail) is None
    assert value(s, "gateway_slo_error_budget_remaining", **acme) is None
    old = {"model": "digits", "slo": "old", "tenant": ""}
    assert value(s, "gateway_slo_error_budget_remaining", **old) is None
    assert value(s, "gateway_slo_alert_firing", severity="page", **avail) == 0


def test_scrape_hooks_run_before_each_scrape_and_a_broken_one_is_skipped() -> None:
    m = Metrics(process=False)
    in_flight = {"digits": 4}

    def copy_in_flight() -> None:
        for model, count in in_flight.items():
            m.set_in_flight(model, count)

    def broken() -> None:
        raise RuntimeError("bug in a hook")

    m.on_scrape(broken)
    m.on_scrape(copy_in_flight)
    assert value(scrape(m), "gateway_in_flight_requests", model="digits") == 4
    in_flight["digits"] = 7
    assert value(scrape(m), "gateway_in_flight_requests", model="digits") == 7


def test_each_instance_owns_its_registry_with_process_metrics() -> None:
    a, b = Metrics(), Metrics()
    a.retry("digits")
    assert value(scrape(b), "gateway_retries_total", model="digits") is None
    assert "process_cpu_seconds_total" in names(scrape(a))
    assert REGISTRY.get_sample_value("gateway_retries_total", {"model": "digits"}) is None


def test_openmetrics_is_served_when_asked_for() -> None:
    m = Metrics(process=False)
    m.request("digits", "single", 200, "r1", 0.003)
    body, content_type = m.render("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    families = parse_om(body.decode())  # type: ignore[no-untyped-call]
    samples: list[Sample] = [s for f in families for s in f.samples]
    assert any(s.name == "gateway_requests_total" and s.value == 1 for s in samples)


def test_the_tenant_label_holds_configured_tenants_and_anonymous_only() -> None:
    m = Metrics(process=False, tenants=["acme"])
    m.request("digits", "single", 200, "r1", 0.003, tenant="acme")
    m.request("digits", "single", 200, "r1", 0.003)
    for i in range(3 * MAX_LABEL_VALUES):  # a bug passing key material never grows the series
        m.request("digits", "single", 200, "r1", 0.003, tenant=f"sk-{i}")
    s = scrape(m)
    tenants = {
        dict(labels)["tenant"]: v
        for (name, labels), v in s.items()
        if name == "gateway_requests_total"
    }
    assert tenants == {"acme": 1, "anonymous": 1 + 3 * MAX_LABEL_VALUES}


def test_a_replica_that_joins_later_is_located_once_then_remembered() -> None:
    asked: list[str] = []

    def locate(replica: str) -> str | None:
        asked.append(replica)
        return "svm" if replica == "svm-10.0.0.7" else None

    topology = Topology(pools={"svm": "digits-svm"}, locate=locate)
    m = Metrics(process=False, topology=topology)
    m.ejection("svm-10.0.0.7", "consecutive_failures")
    m.set_replica("svm-10.0.0.7", healthy=False, ejected=True, outstanding=0)
    m.set_replica("stranger", healthy=True, ejected=False, outstanding=0)
    s = scrape(m)
    joined = {"model": "digits-svm", "pool": "svm", "replica": "svm-10.0.0.7"}
    assert value(s, "gateway_ejections_total", reason="consecutive_failures", **joined) == 1
    assert value(s, "gateway_replica_ejected", **joined) == 1
    assert value(s, "gateway_replica_healthy", model="", pool="", replica="stranger") == 1
    assert asked == ["svm-10.0.0.7", "stranger"]


def test_a_departed_replicas_series_are_dropped_and_the_others_kept() -> None:
    topology = Topology(TOPOLOGY.models, TOPOLOGY.pools, dict(TOPOLOGY.replicas))  # its own
    m = Metrics(process=False, topology=topology)
    for replica in ("r1", "r2"):
        m.request("digits", "single", 200, replica, 0.01)
        m.attempt("digits", "mlp", Outcome(OutcomeKind.SUCCESS, replica, 0.01))
        m.per_try_timeout("digits", "mlp", replica)
        m.ejection(replica, "consecutive_failures")
        m.breaker_state(replica, "open")
        m.set_replica(replica, healthy=True, ejected=False, outstanding=0)
    m.vote("digits-vote", "2/3", ["r1", "r2"])

    m.forget_replica("r1")

    s = scrape(m)
    named = {(n, dict(labels).get("replica"), dict(labels).get("served_by")) for n, labels in s}
    assert not [x for x in named if "r1" in x[1:]], "a series still names the departed r1"
    mlp_r2 = {"model": "digits-mlp", "pool": "mlp", "replica": "r2"}
    assert value(s, "gateway_ejections_total", reason="consecutive_failures", **mlp_r2) == 1
    assert value(s, "gateway_replica_healthy", **mlp_r2) == 1
    r2_attempts = {"model": "digits", "pool": "mlp", "replica": "r2", "outcome": "success"}
    assert value(s, "gateway_upstream_attempts_total", **r2_attempts) == 1

    m.attempt("digits", "mlp", Outcome(OutcomeKind.SUCCESS, "r1", 0.01))  # it came back
    back = {"model": "digits", "pool": "mlp", "replica": "r1", "outcome": "success"}
    assert value(scrape(m), "gateway_upstream_attempts_total", **back) == 1  # counted afresh

from __future__ import annotations

from prometheus_client import REGISTRY
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gateway.outcome import Outcome, OutcomeKind
from gateway.policies.classify import classify_status
from gateway.telemetry.catalog import LATENCY_BUCKETS
from gateway.telemetry.metrics import MAX_LABEL_VALUES, Metrics

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


def test_requests_are_counted_by_model_route_status_and_served_by() -> None:
    m = Metrics(process=False)
    m.request("digits", "single", 200, "r1", 0.003)
    m.request("digits", "single", 200, "r1", 0.004)
    m.request("digits", "vote", 200, "r2", 0.010)
    m.request("digits", "single", 503, "", 0.2, degraded_reason="no_replica")
    s = scrape(m)
    common = {"model": "digits", "route": "single", "tenant": "anonymous"}
    ok = value(
        s, "gateway_requests_total", code="200", status_class="2xx", served_by="r1", **common
    )
    assert ok == 2
    failed = {"code": "503", "status_class": "5xx", "served_by": "none"}
    assert value(s, "gateway_requests_total", **failed, **common) == 1
    assert value(s, "gateway_degraded_responses_total", model="digits", reason="no_replica") == 1


def test_request_latency_histogram_has_cumulative_buckets_count_and_sum() -> None:
    m = Metrics(process=False)
    for latency in (0.0009, 0.001, 0.003, 7.0, 99.0):
        m.request("digits", "single", 200, "r1", latency)
    s = scrape(m)
    labels = {"model": "digits", "route": "single", "status_class": "2xx"}
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


def test_attempts_are_counted_and_timed_by_replica_and_outcome() -> None:
    m = Metrics(process=False)
    m.attempt("digits", classify_status("r1", 200, 0.002))
    m.attempt("digits", classify_status("r1", 503, 0.001))
    m.attempt("digits", Outcome(OutcomeKind.TIMEOUT, "r2", 0.5))
    s = scrape(m)
    assert value(s, "gateway_upstream_attempts_total", model="digits", replica="r1",
                 outcome="success") == 1  # fmt: skip
    assert value(s, "gateway_upstream_attempts_total", model="digits", replica="r1",
                 outcome="server_error") == 1  # fmt: skip
    timeout = {"model": "digits", "replica": "r2", "outcome": "timeout"}
    assert value(s, "gateway_upstream_attempt_duration_seconds_count", **timeout) == 1
    assert value(s, "gateway_upstream_attempt_duration_seconds_bucket", le="0.25", **timeout) == 0
    assert value(s, "gateway_upstream_attempt_duration_seconds_bucket", le="0.5", **timeout) == 1


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
    assert value(s, "gateway_breaker_state", replica="r1") == 1  # half-open
    assert value(s, "gateway_breaker_state", replica="r2") == 0
    assert value(s, "gateway_breaker_transitions_total", replica="r1", **{"from": "closed",
                 "to": "open"}) == 1  # fmt: skip
    assert value(s, "gateway_ejections_total", replica="r3", reason="consecutive_failures") == 1
    assert value(s, "gateway_votes_total", model="digits", tally="2/3") == 1
    assert value(s, "gateway_votes_total", model="digits", tally="no_quorum") == 1
    assert value(s, "gateway_vote_dissents_total", model="digits", replica="r2") == 1
    assert value(s, "gateway_fallbacks_total", model="digits", reason="no_quorum") == 1
    assert value(s, "gateway_quarantines_total", replica="r2", reason="vote_dissent") == 1
    assert value(s, "gateway_state_store_degraded") == 1
    assert value(s, "gateway_retry_budget_balance") == 12.5
    assert value(s, "gateway_replica_healthy", replica="r1") == 1
    assert value(s, "gateway_replica_ejected", replica="r1") == 0
    assert value(s, "gateway_replica_outstanding_requests", replica="r1") == 3
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
    assert value(s, "gateway_ejections_total", replica="r1", reason="other") == 1
    reasons = {dict(k)["reason"] for n, k in s if n == "gateway_fallbacks_total"}
    assert len(reasons) == MAX_LABEL_VALUES + 1 and "other" in reasons


def test_slo_document_sets_budget_burn_rates_and_alerts_and_replaces_old_ones() -> None:
    m = Metrics(process=False)
    m.set_slo({"slos": [{"name": "avail", "objective": 0.999, "budget_remaining": 0.25,
                         "burn_rates": {"5m": 14.4, "1h": 2.0},
                         "alerts": {"page": True, "ticket": False}},
                        {"name": "old", "budget_remaining": 1.0}]})  # fmt: skip
    s = scrape(m)
    assert value(s, "gateway_slo_objective", slo="avail") == 0.999
    assert value(s, "gateway_slo_error_budget_remaining", slo="avail") == 0.25
    assert value(s, "gateway_slo_burn_rate", slo="avail", window="5m") == 14.4
    assert value(s, "gateway_slo_burn_rate", slo="avail", window="1h") == 2.0
    assert value(s, "gateway_slo_alert_firing", slo="avail", severity="page") == 1
    assert value(s, "gateway_slo_alert_firing", slo="avail", severity="ticket") == 0
    # The other accepted shapes: slos by name, lists of windows and alerts.
    m.set_slo({"slos": {"avail": {"budget_remaining": -0.5,
                                  "burn_rates": [{"window": "5m", "burn_rate": 20}],
                                  "alerts": [{"severity": "page", "firing": False}]}}})  # fmt: skip
    s = scrape(m)
    assert value(s, "gateway_slo_error_budget_remaining", slo="avail") == -0.5
    assert value(s, "gateway_slo_burn_rate", slo="avail", window="5m") == 20
    assert value(s, "gateway_slo_burn_rate", slo="avail", window="1h") is None
    assert value(s, "gateway_slo_error_budget_remaining", slo="old") is None
    assert value(s, "gateway_slo_alert_firing", slo="avail", severity="page") == 0


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
        dict(labels)["tenant"]: v for (name, labels), v in s.items()
        if name == "gateway_requests_total"
    }  # fmt: skip
    assert tenants == {"acme": 1, "anonymous": 1 + 3 * MAX_LABEL_VALUES}

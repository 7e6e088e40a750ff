from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from pydantic import ValidationError

from gateway.faults.classify import classify_status
from gateway.outcome import Outcome, OutcomeKind
from gateway.telemetry.tracecontext import parse_traceparent
from gateway.telemetry.tracing import MAX_QUEUED_SPANS, Tracer, TracingConfig, otlp_traces_url

INCOMING = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_a_request_span_has_one_child_per_attempt_failed_then_ok(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = Tracer(exporter=exporter)
    span = tracer.start_request({}, "digits", request_id="req-1")
    first = span.attempt("r1", 1, "closed")
    first.end(classify_status("r1", 503, 0.01, "overloaded"))
    second = span.attempt("r2", 2, "half-open")
    second.end(classify_status("r2", 200, 0.002))
    span.end(200, served_by="r2")

    spans = exporter.get_finished_spans()
    [request] = by_name(spans, "infer")
    failed, ok = by_name(spans, "attempt")
    assert request.kind is SpanKind.SERVER and request.parent is None
    assert request.attributes is not None and ok.attributes is not None
    assert failed.attributes is not None
    assert request.attributes["gateway.model"] == "digits"
    assert request.attributes["gateway.request_id"] == "req-1"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["gateway.attempts"] == 2
    assert request.attributes["gateway.served_by"] == "r2"
    assert request.status.status_code is StatusCode.UNSET
    assert request.context is not None
    for child in (failed, ok):
        assert child.kind is SpanKind.CLIENT
        assert child.parent is not None and child.context is not None
        assert child.parent.span_id == request.context.span_id
        assert child.context.trace_id == request.context.trace_id
    assert failed.attributes["gateway.replica"] == "r1"
    assert failed.attributes["gateway.attempt"] == 1
    assert failed.attributes["gateway.outcome"] == "server_error"
    assert failed.attributes["gateway.breaker_state"] == "closed"
    assert failed.attributes["http.response.status_code"] == 503
    assert failed.attributes["error.type"] == "server_error"
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "r1 answered 503: overloaded"
    assert ok.attributes["gateway.replica"] == "r2"
    assert ok.attributes["gateway.attempt"] == 2
    assert ok.attributes["gateway.breaker_state"] == "half-open"
    assert ok.attributes["gateway.outcome"] == "success"
    assert ok.status.status_code is StatusCode.UNSET
    assert request.start_time is not None and request.end_time is not None
    assert ok.end_time is not None and request.start_time <= ok.end_time <= request.end_time


def test_an_incoming_traceparent_continues_the_callers_trace(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = Tracer(exporter=exporter)
    span = tracer.start_request({"traceparent": INCOMING, "tracestate": "k=v"}, "digits")
    assert span.trace_id == "0af7651916cd43dd8448eb211c80319c"
    attempt = span.attempt("r1", 1, "closed")
    assert attempt.inject() == {"traceparent": attempt.traceparent, "tracestate": "k=v"}
    attempt.end(classify_status("r1", 200, 0.001))
    span.end(200)
    [request] = by_name(exporter.get_finished_spans(), "infer")
    assert request.parent is not None and request.parent.is_remote
    assert request.parent.span_id == 0xB7AD6B7169203331
    assert request.parent.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    echoed = parse_traceparent(span.traceparent)
    assert echoed is not None and echoed.trace_id == span.trace_id
    assert request.context is not None and int(echoed.span_id, 16) == request.context.span_id


def test_each_attempt_injects_its_own_w3c_traceparent(exporter: InMemorySpanExporter) -> None:
    span = Tracer(exporter=exporter).start_request({"traceparent": INCOMING}, "digits")
    before = span.inject()["traceparent"]
    assert before == span.traceparent  # no attempt yet: the request's own span
    first = span.attempt("r1", 1, "closed")
    assert span.inject() == first.inject()  # the current attempt
    second = span.attempt("r2", 2, "closed")
    headers = {"content-type": "application/json"}
    assert span.inject(headers) is headers and headers["traceparent"] == second.traceparent
    parsed = [parse_traceparent(a.traceparent) for a in (first, second)]
    assert all(p is not None and p.trace_id == span.trace_id and p.sampled for p in parsed)
    assert len({span.traceparent, first.traceparent, second.traceparent}) == 3
    first.end(Outcome(OutcomeKind.CANCELLED, "r1", 0.01))  # a hedge that lost: no error
    second.end(classify_status("r2", 200, 0.001))
    span.end(200)
    cancelled = by_name(exporter.get_finished_spans(), "attempt")[0]
    assert cancelled.status.status_code is StatusCode.UNSET
    assert cancelled.attributes is not None
    assert cancelled.attributes["gateway.outcome"] == "cancelled"


def test_a_5xx_answer_marks_the_request_span_as_an_error(exporter: InMemorySpanExporter) -> None:
    span = Tracer(exporter=exporter).start_request({}, "digits")
    span.attempt("r1", 1, "open").end(Outcome(OutcomeKind.CONNECT_ERROR, "r1", 0.001))
    span.set("gateway.route", "single")
    span.end(503, degraded="no_replica")
    span.end(200)  # a second end is ignored
    [request] = by_name(exporter.get_finished_spans(), "infer")
    assert request.status.status_code is StatusCode.ERROR
    assert request.attributes is not None
    assert request.attributes["gateway.degraded"] == "no_replica"
    assert request.attributes["gateway.route"] == "single"
    assert len(exporter.get_finished_spans()) == 2


def test_without_an_exporter_ids_are_still_made_propagated_and_echoed() -> None:
    tracer = Tracer()
    assert not tracer.recording
    span = tracer.start_request({}, "digits")
    attempt = span.attempt("r1", 1, "closed")
    echoed, sent = parse_traceparent(span.traceparent), parse_traceparent(attempt.traceparent)
    assert echoed is not None and sent is not None
    assert echoed.trace_id == sent.trace_id == span.trace_id and echoed.sampled
    # nothing is recorded, so there is no attempt span: the replica continues the request's
    assert echoed.span_id == sent.span_id
    attempt.end(classify_status("r1", 200, 0.001))
    span.end(200)


def test_a_caller_that_does_not_sample_is_followed(exporter: InMemorySpanExporter) -> None:
    unsampled = INCOMING[:-2] + "00"
    span = Tracer(exporter=exporter).start_request({"traceparent": unsampled}, "digits")
    attempt = span.attempt("r1", 1, "closed")
    assert attempt.inject()["traceparent"].endswith("-00")
    attempt.end(classify_status("r1", 200, 0.001))
    span.end(200)
    assert exporter.get_finished_spans() == ()


def test_sample_ratio_zero_records_nothing_but_still_propagates(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = Tracer(TracingConfig(sample_ratio=0.0), exporter=exporter)
    span = tracer.start_request({}, "digits")
    assert span.traceparent is not None and span.traceparent.endswith("-00")
    span.end(200)
    assert exporter.get_finished_spans() == ()


def test_disabled_tracing_forwards_the_callers_headers_and_echoes_nothing(
    exporter: InMemorySpanExporter,
) -> None:
    tracer = Tracer(TracingConfig(enabled=False), exporter=exporter)
    span = tracer.start_request({"traceparent": INCOMING, "tracestate": "k=v"}, "digits")
    assert span.traceparent is None and span.trace_id is None
    attempt = span.attempt("r1", 1, "closed")
    assert attempt.inject() == {"traceparent": INCOMING, "tracestate": "k=v"}
    attempt.end(classify_status("r1", 200, 0.001))
    span.end(200)
    assert tracer.start_request({}, "digits").inject() == {}
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("sampled", [True, False])
def test_a_tracestate_that_is_not_w3c_never_reaches_a_replica(
    exporter: InMemorySpanExporter, enabled: bool, sampled: bool
) -> None:
    tracer = Tracer(TracingConfig(enabled=enabled), exporter=exporter)
    parent = INCOMING if sampled else INCOMING[:-2] + "00"
    for bad in ("a=b\r\nx-evil: 1", "a=b\x00c", "a=b\x0bc", "a=b\x7fc", "a=é"):
        span = tracer.start_request({"traceparent": parent, "tracestate": bad}, "digits")
        sent = span.attempt("r1", 1, "closed").inject()
        assert "tracestate" not in sent and "tracestate" not in span.inject(), (bad, sent)
        assert parse_traceparent(sent["traceparent"]) is not None
    span = tracer.start_request({"traceparent": parent, "tracestate": " k=v ,\tj=w,"}, "digits")
    assert span.attempt("r1", 1, "closed").inject()["tracestate"] == "k=v,j=w"


def test_disabled_tracing_forwards_no_invalid_traceparent() -> None:
    tracer = Tracer(TracingConfig(enabled=False))
    for bad in (INCOMING + "\r\nx-evil: 1", INCOMING[:-1] + "\x00", "garbage"):
        span = tracer.start_request({"traceparent": bad, "tracestate": "k=v"}, "digits")
        assert span.attempt("r1", 1, "closed").inject() == {}, repr(bad)


def test_the_batch_processor_exports_on_flush_and_shutdown(exporter: InMemorySpanExporter) -> None:
    tracer = Tracer(exporter=exporter, batch=True)
    span = tracer.start_request({}, "digits")
    span.end(200)
    assert tracer.force_flush()
    assert len(exporter.get_finished_spans()) == 1
    tracer.shutdown()
    assert not tracer.recording


def test_spans_for_a_collector_that_hangs_wait_in_a_bounded_queue() -> None:
    release = threading.Event()

    class Hung(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            release.wait(10.0)  # the exporter's thread stuck on a collector that never answers
            return SpanExportResult.SUCCESS

    tracer = Tracer(exporter=Hung(), batch=True)
    for _ in range(3 * MAX_QUEUED_SPANS):
        tracer.start_request({}, "digits").end(200)
    queue = tracer._recorder.processor._batch_processor._queue  # type: ignore[union-attr]
    try:
        assert len(queue) <= MAX_QUEUED_SPANS
    finally:
        release.set()
        tracer.shutdown()


def test_a_failing_exporter_never_fails_the_request() -> None:
    class Broken(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            raise RuntimeError("collector down")

    span = Tracer(exporter=Broken()).start_request({}, "digits")
    span.attempt("r1", 1, "closed").end(classify_status("r1", 200, 0.001))
    span.end(200)


def test_config_is_frozen_strict_and_checks_the_endpoint() -> None:
    config = TracingConfig(otlp_endpoint="http://collector:4318", sample_ratio=0.1)
    with pytest.raises(ValidationError):
        TracingConfig(sample_ratio=2)
    with pytest.raises(ValidationError):
        TracingConfig(otlp_endpoint="collector:4318")
    with pytest.raises(ValidationError):
        TracingConfig(exporter="otlp")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        config.enabled = False  # type: ignore[misc]
    assert otlp_traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert otlp_traces_url("http://c:4318/custom/path") == "http://c:4318/custom/path"


def test_an_otlp_endpoint_sets_up_a_batch_exporter() -> None:
    tracer = Tracer(TracingConfig(otlp_endpoint="http://127.0.0.1:9/"))
    assert tracer.recording
    tracer.shutdown()  # nothing was recorded: shutting down sends nothing

"""Telemetry micro-benchmark: CPU µs per request for metrics, tracing and logging.

The gateway's whole budget is ≈ 115 µs of CPU per proxied request, so each telemetry piece
is measured alone, in-process, as the request path would call it (best of several runs,
µs per call). Alternatives the design rejected are measured too, to show why.
Run: ``.venv/bin/python loadtests/bench_telemetry.py [--number 20000]``.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import prometheus_client
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.faults.classify import classify_status
from gateway.telemetry.catalog import LATENCY_BUCKETS
from gateway.telemetry.logging import JsonFormatter, TextFormatter, bind_request, unbind_request
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.tracing import Tracer, TracingConfig

INCOMING = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
OK = classify_status("digits-1", 200, 0.0031)


class NullExporter(SpanExporter):
    """Accepts spans and drops them: the batch processor's cost without a network."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def metrics_request(sizes: bool = True) -> Callable[[], None]:
    """What one proxied request records: its first send's queue time, the attempt, and the
    answer at the edge with its bodies' sizes and rows (``sizes=False``: the last two only)."""
    m = Metrics()

    def run() -> None:
        m.queued("digits", 0.00004)
        m.attempt("digits", "digits-pool", OK)
        m.request("digits", "single", 200, "digits-1", 0.0031, None, "anonymous", 620, 480, 1)

    def core() -> None:
        m.attempt("digits", "digits-pool", OK)
        m.request("digits", "single", 200, "digits-1", 0.0031)

    return run if sizes else core


def prometheus_children() -> Callable[[], None]:
    """The rejected alternative: prometheus_client's own metrics, label children cached."""
    registry = prometheus_client.CollectorRegistry()
    labels = ("model", "version", "route", "code", "served_by")
    requests = prometheus_client.Counter("r_total", "", labels, registry=registry)
    duration = prometheus_client.Histogram(
        "d_seconds", "", labels[:2], registry=registry, buckets=LATENCY_BUCKETS
    )
    attempts = prometheus_client.Counter("a_total", "", ("m", "r", "o"), registry=registry)
    attempt_duration = prometheus_client.Histogram(
        "ad_seconds", "", ("m", "r", "o"), registry=registry, buckets=LATENCY_BUCKETS
    )
    cache = {
        "req": (
            requests.labels("digits", "1", "single", "200", "digits-1"),
            duration.labels("digits", "single"),
        ),
        "att": (
            attempts.labels("digits", "digits-1", "success"),
            attempt_duration.labels("digits", "digits-1", "success"),
        ),
    }

    def run() -> None:
        count, hist = cache["req"]
        count.inc()
        hist.observe(0.0031)
        count, hist = cache["att"]
        count.inc()
        hist.observe(0.0031)

    return run


def traced(tracer: Tracer, headers: dict[str, str]) -> Callable[[], None]:
    def run() -> None:
        span = tracer.start_request(headers, "digits", "req-1")
        attempt = span.attempt("digits-1", 1, "closed")
        attempt.inject({"content-type": "application/json"})
        attempt.end(OK)
        span.end(200, "digits-1")

    return run


def sdk_spans() -> Callable[[], None]:
    """The rejected alternative: the SDK's own Tracer and propagator, no processor at all."""
    tracer = TracerProvider().get_tracer("gateway")
    propagator = TraceContextTextMapPropagator()

    def run() -> None:
        context = propagator.extract(INCOMING)
        span = tracer.start_span("infer", context, trace.SpanKind.SERVER, {"model": "digits"})
        child = tracer.start_span(
            "attempt",
            trace.set_span_in_context(span),
            trace.SpanKind.CLIENT,
            {"replica": "digits-1", "attempt": 1, "breaker": "closed"},
        )
        propagator.inject({}, trace.set_span_in_context(child))
        child.set_attribute("outcome", "success")
        child.end()
        span.set_attribute("status", 200)
        span.end()

    return run


def log_line(formatter: logging.Formatter) -> Callable[[], None]:
    """One line through a real handler into memory, inside a request's log context."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(formatter)
    logger = logging.getLogger("bench.telemetry")
    logger.propagate = False
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO)
    bind_request("req-1", Tracer().start_request({}, "digits"))

    def run() -> None:
        logger.warning("replica %s ejected", "digits-1", extra={"replica": "digits-1"})
        sink.seek(0)
        sink.truncate()

    return run


def debug_skipped() -> Callable[[], None]:
    logger = logging.getLogger("bench.telemetry.quiet")
    logger.setLevel(logging.INFO)
    return lambda: logger.debug("attempt %s", 1)


def bind_unbind() -> None:
    unbind_request(bind_request("req-1"))


def otlp_encoding() -> Callable[[], None]:
    """What the OTLP exporter's thread spends encoding one request's two spans (per request)."""
    memory = InMemorySpanExporter()
    traced(Tracer(exporter=memory), {})()
    spans = memory.get_finished_spans() * 256  # 256 requests: a batch of 512 spans

    def run() -> None:
        encode_spans(spans).SerializeToString()

    return run


def measure(run: Callable[[], object], number: int, per_call: int = 1) -> float:
    """Best of five runs, in µs per call (``per_call`` calls made by each ``run``)."""
    run()
    return min(timeit.repeat(run, number=number, repeat=5)) / number / per_call * 1e6


def measure_batch(tracer: Tracer, runs: int = 20) -> float:
    """At most 1,000 requests a run: their 2,000 spans fit the batch queue (2,048), none lost."""
    run = traced(tracer, {})
    best = float("inf")
    for _ in range(runs):
        tracer.force_flush()
        best = min(best, timeit.timeit(run, number=1000))
    return best / 1000 * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000, help="calls per run")
    n = parser.parse_args(argv).number
    off, batch = Tracer(TracingConfig(enabled=False)), Tracer(exporter=NullExporter(), batch=True)
    memory = InMemorySpanExporter()
    rows: list[tuple[str, Callable[[], float]]] = [
        (
            "metrics: request + attempt (gateway.telemetry)",
            lambda: measure(metrics_request(sizes=False), n),
        ),
        (
            "metrics: + queue time, body sizes, rows (every request)",
            lambda: measure(metrics_request(), n),
        ),
        (
            "metrics: same with prometheus_client children",
            lambda: measure(prometheus_children(), n),
        ),
        ("tracing: off (enabled=False, pass-through)", lambda: measure(traced(off, {}), n)),
        ("tracing: no exporter, new trace", lambda: measure(traced(Tracer(), {}), n)),
        (
            "tracing: no exporter, incoming traceparent",
            lambda: measure(traced(Tracer(), INCOMING), n),
        ),
        ("tracing: batch exporter (null sink), 2 spans", lambda: measure_batch(batch)),
        (
            "tracing: in-memory exporter (simple), 2 spans",
            lambda: measure(traced(Tracer(exporter=memory), {}), 2000),
        ),
        (
            "tracing: + OTLP protobuf encoding (export thread)",
            lambda: measure(otlp_encoding(), 10, per_call=256),
        ),
        ("tracing: OTel SDK Tracer, no processor", lambda: measure(sdk_spans(), n)),
        ("logs: bind + unbind request ids", lambda: measure(bind_unbind, n)),
        (
            "logs: one JSON line (with request/trace id)",
            lambda: measure(log_line(JsonFormatter()), n),
        ),
        ("logs: one text line", lambda: measure(log_line(TextFormatter()), n)),
        ("logs: debug call below the level", lambda: measure(debug_skipped(), n)),
    ]
    print(f"{'what (per request)':<52} {'µs':>8}")
    for name, bench in rows:
        print(f"{name:<52} {bench():8.2f}", flush=True)
        memory.clear()
    batch.shutdown()


if __name__ == "__main__":
    main()

"""Tracing setup: config, the OTLP exporter when one is named, and the `Tracer` the path calls.

With no exporter (the default) every request still gets valid W3C ids, propagated to the
replicas and echoed to the client, cheaply; spans are built and exported only when an
exporter is configured and the trace is sampled (the OTLP exporter's protobuf encoding, in its
own thread, costs the most: under heavy load, lower ``sample_ratio``; loadtests/bench_telemetry.py).
Tests pass the SDK's in-memory exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from pydantic import Field, field_validator

from gateway import __version__
from gateway.frozen import Frozen
from gateway.telemetry.recorder import Attributes, SpanRecorder
from gateway.telemetry.spans import RequestSpan, TracedRequest, UntracedRequest
from gateway.telemetry.tracecontext import (
    TRACEPARENT,
    TRACESTATE,
    RootSampler,
    clean_tracestate,
    new_trace_id,
    parse_traceparent,
)

OTLP_TRACES_PATH = "/v1/traces"
# Finished spans waiting for the exporter's thread, at most: past it new spans are dropped (the
# SDK's own default, stated here because it is the gateway's memory bound when a collector is
# slow or down). Exports go in batches of up to EXPORT_BATCH.
MAX_QUEUED_SPANS = 2048
EXPORT_BATCH = 512


class TracingConfig(Frozen):
    """``otlp_endpoint``: an OTLP/HTTP collector (``http://host:4318``); None exports nothing."""

    enabled: bool = Field(True, description="false: no trace ids, no spans")
    otlp_endpoint: str | None = Field(
        None, description="an OTLP/HTTP collector (http://host:4318); none: spans are not exported"
    )
    service_name: str = Field("v2-gateway", min_length=1, description="service.name of the spans")
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0, description="share of new traces exported")

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"otlp_endpoint must be an http(s) URL, got {value!r}")
        return value


def otlp_traces_url(endpoint: str) -> str:
    """A bare collector address gets the standard OTLP/HTTP traces path."""
    return (
        endpoint.rstrip("/") + OTLP_TRACES_PATH
        if urlsplit(endpoint).path in ("", "/")
        else endpoint
    )


class Tracer:
    """Starts request spans. Create it in the serving process (the batch exporter owns a thread)."""

    def __init__(
        self,
        config: TracingConfig | None = None,
        exporter: SpanExporter | None = None,
        *,
        batch: bool | None = None,
    ) -> None:
        """``exporter`` overrides ``otlp_endpoint``; ``batch`` defaults to True for OTLP only."""
        self.config = config or TracingConfig()
        # read on every request: a plain attribute (a pydantic model's reads go through its
        # ``__getattr__`` hook)
        self._enabled = self.config.enabled
        self._sampler = RootSampler(self.config.sample_ratio)
        self._recorder: SpanRecorder | None = None
        if exporter is None and self.config.otlp_endpoint is not None and self.config.enabled:
            exporter = _otlp_exporter(self.config.otlp_endpoint)
            batch = True if batch is None else batch
        if exporter is not None and self.config.enabled:
            processor: SpanProcessor = (
                BatchSpanProcessor(
                    exporter, max_queue_size=MAX_QUEUED_SPANS, max_export_batch_size=EXPORT_BATCH
                )
                if batch
                else SimpleSpanProcessor(exporter)
            )
            resource = Resource.create({"service.name": self.config.service_name})
            scope = InstrumentationScope("gateway", __version__)
            self._recorder = SpanRecorder(processor, resource, scope)

    @property
    def recording(self) -> bool:
        return self._recorder is not None

    def start_request(
        self, headers: Mapping[str, str], model: str, request_id: str | None = None
    ) -> RequestSpan:
        """The request's span, continuing the caller's trace when ``headers`` carry one.

        ``headers`` are the client's, lower-case names (as ASGI gives them).
        """
        if not self._enabled:
            return UntracedRequest(headers)
        parent = parse_traceparent(headers.get(TRACEPARENT))
        if parent is None:
            trace_id, tracestate = new_trace_id(), None
        else:
            trace_id, tracestate = parent.trace_id, clean_tracestate(headers.get(TRACESTATE))
        sampled = self._sampler.sampled(trace_id, parent)
        attributes: Attributes | None = None
        if sampled and self._recorder is not None:
            attributes = {"gateway.model": model, "http.request.method": "POST"}
            if request_id is not None:
                attributes["gateway.request_id"] = request_id
        return TracedRequest(self._recorder, trace_id, sampled, parent, tracestate, attributes)

    def force_flush(self, timeout_ms: int = 5000) -> bool:
        return self._recorder is None or self._recorder.processor.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """Flushes and stops the exporter; call once when the gateway stops."""
        if self._recorder is not None:
            self._recorder.processor.shutdown()
            self._recorder = None


def _otlp_exporter(endpoint: str) -> SpanExporter:
    # Imported only when configured: the OTLP exporter pulls in protobuf and requests.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=otlp_traces_url(endpoint))

"""Hands finished spans to the OpenTelemetry SDK's span processor as ``ReadableSpan`` objects.

Building the SDK's own ``ReadableSpan`` from a few fields costs a fraction of a span started
and ended through its ``Tracer`` (see `gateway.telemetry.spans`); every
exporter the SDK has (OTLP, in-memory, console) accepts these spans unchanged.
"""

from __future__ import annotations

import logging

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

log = logging.getLogger(__name__)

UNSET = Status(StatusCode.UNSET)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
Attributes = dict[str, AttributeValue]


class SpanRecorder:
    """Turns a finished span's fields into a ``ReadableSpan`` for the SDK's span processor."""

    def __init__(
        self, processor: SpanProcessor, resource: Resource, scope: InstrumentationScope
    ) -> None:
        self.processor = processor
        self._resource = resource
        self._scope = scope
        self._failed_once = False

    def record(
        self,
        name: str,
        kind: SpanKind,
        # trace id, span id, parent span id, remote
        ids: tuple[str, str, str | None, bool],
        times: tuple[int, int],
        attributes: Attributes,
        status: Status = UNSET,
    ) -> None:
        trace_id, span_id, parent_id, remote = ids
        trace = int(trace_id, 16)
        parent = None
        if parent_id is not None:
            parent = SpanContext(trace, int(parent_id, 16), remote, _SAMPLED)
        span = ReadableSpan(
            name,
            SpanContext(trace, int(span_id, 16), False, _SAMPLED),
            parent,
            self._resource,
            attributes,
            kind=kind,
            status=status,
            start_time=times[0],
            end_time=times[1],
            instrumentation_scope=self._scope,
        )
        try:
            self.processor.on_end(span)
        except Exception:
            # an exporter's trouble must never fail a request
            if not self._failed_once:
                self._failed_once = True
                log.warning("span processor failed; later failures are not logged", exc_info=True)

"""Request and attempt spans: W3C context always, recorded into the OpenTelemetry SDK if sampled.

The SDK's ``Tracer.start_span`` is costly per span (attribute validation, context lookups,
locks): a request with one attempt would spend a large share of the gateway's CPU budget on it
(loadtests/bench_telemetry.py). So spans are held as a few slots and, when recorded, handed to
the SDK's span processor and exporters as finished spans (`gateway.telemetry.recorder`).
Trade-off: the processors see ``on_end`` only, never ``on_start``; the batch and simple
processors, the only ones the gateway configures, need nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Protocol

from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from gateway.outcome import Outcome, OutcomeKind
from gateway.telemetry.recorder import UNSET, Attributes, SpanRecorder
from gateway.telemetry.tracecontext import (
    TRACEPARENT,
    TRACESTATE,
    TraceParent,
    clean_traceparent,
    clean_tracestate,
    format_traceparent,
    new_span_id,
)

_NOT_FAILED = frozenset({OutcomeKind.SUCCESS, OutcomeKind.SLOW, OutcomeKind.CANCELLED})


class AttemptSpan(Protocol):
    @property
    def traceparent(self) -> str | None: ...

    def inject(self, carrier: dict[str, str] | None = None) -> dict[str, str]: ...
    def end(self, outcome: Outcome) -> None: ...


class RequestSpan(Protocol):
    @property
    def trace_id(self) -> str | None: ...
    @property
    def traceparent(self) -> str | None:
        """Echo this to the client; None when tracing is disabled."""

    def attempt(self, replica_id: str, attempt_no: int, breaker_state: str) -> AttemptSpan: ...
    def inject(self, carrier: dict[str, str] | None = None) -> dict[str, str]: ...
    def set(self, key: str, value: AttributeValue) -> None: ...
    def end(
        self, status: int, served_by: str | None = None, degraded: str | None = None
    ) -> None: ...


class TracedRequest:
    """The gateway's server span; records only when sampled and an exporter is configured."""

    __slots__ = (
        "_attempts",
        "_attributes",
        "_current",
        "_ended",
        "_parent",
        "_recorder",
        "_start_ns",
        "_unrecorded",
        "span_id",
        "trace_id",
        "traceparent",
        "tracestate",
    )

    def __init__(
        self,
        recorder: SpanRecorder | None,
        trace_id: str,
        sampled: bool,
        parent: TraceParent | None,
        tracestate: str | None,
        attributes: Attributes | None,
    ) -> None:
        self.trace_id = trace_id
        self.span_id = new_span_id()
        self.traceparent = format_traceparent(trace_id, self.span_id, sampled)
        self.tracestate = tracestate
        self._parent = parent
        self._recorder = recorder if sampled else None
        self._attributes = attributes if self._recorder is not None else None
        self._start_ns = time.time_ns() if self._recorder is not None else 0
        self._current: TracedAttempt | None = None
        self._unrecorded: UnrecordedAttempt | None = None
        self._attempts = 0
        self._ended = False

    def attempt(self, replica_id: str, attempt_no: int, breaker_state: str) -> AttemptSpan:
        """A client span for one attempt, when this request is recorded; else none: the
        replica continues this request's context (no span id drawn, nothing formatted)."""
        self._attempts += 1
        if self._recorder is None:
            if self._unrecorded is None:
                self._unrecorded = UnrecordedAttempt(self.traceparent, self.tracestate)
            return self._unrecorded
        self._current = TracedAttempt(self, self._recorder, replica_id, attempt_no, breaker_state)
        return self._current

    def inject(self, carrier: dict[str, str] | None = None) -> dict[str, str]:
        """Context for an upstream request: the latest attempt's span, else this one's."""
        if self._current is not None:
            return self._current.inject(carrier)
        return _inject(carrier, self.traceparent, self.tracestate)

    def set(self, key: str, value: AttributeValue) -> None:
        if self._attributes is not None:
            self._attributes[key] = value

    def end(self, status: int, served_by: str | None = None, degraded: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        if self._recorder is None or self._attributes is None:
            return
        attributes = self._attributes
        attributes["http.response.status_code"] = status
        attributes["gateway.attempts"] = self._attempts
        if served_by is not None:
            attributes["gateway.served_by"] = served_by
        if degraded is not None:
            attributes["gateway.degraded"] = degraded
        error = Status(StatusCode.ERROR, f"HTTP {status}") if status >= 500 else UNSET
        parent_id = None if self._parent is None else self._parent.span_id
        ids = (self.trace_id, self.span_id, parent_id, parent_id is not None)
        times = (self._start_ns, time.time_ns())
        self._recorder.record("infer", SpanKind.SERVER, ids, times, attributes, error)


class TracedAttempt:
    """A client span around one upstream exchange, child of its request's span.

    It keeps its request's ids, not the request: the request keeps its latest attempt, and a
    cycle between the two would leave every request's spans to the cyclic collector instead
    of freeing them when the request ends.
    """

    __slots__ = (
        "_ended",
        "_parent_id",
        "_recorder",
        "_start_ns",
        "_trace_id",
        "_tracestate",
        "attempt_no",
        "breaker_state",
        "replica_id",
        "span_id",
        "traceparent",
    )

    def __init__(
        self,
        request: TracedRequest,
        recorder: SpanRecorder | None,
        replica_id: str,
        attempt_no: int,
        breaker_state: str,
    ) -> None:
        self._trace_id = request.trace_id
        self._parent_id = request.span_id
        self._tracestate = request.tracestate
        self._recorder = recorder
        self.replica_id = replica_id
        self.attempt_no = attempt_no
        self.breaker_state = breaker_state
        self.span_id = new_span_id()
        self.traceparent = format_traceparent(request.trace_id, self.span_id, recorder is not None)
        self._start_ns = time.time_ns() if recorder is not None else 0
        self._ended = False

    def inject(self, carrier: dict[str, str] | None = None) -> dict[str, str]:
        return _inject(carrier, self.traceparent, self._tracestate)

    def end(self, outcome: Outcome) -> None:
        if self._ended:
            return
        self._ended = True
        if self._recorder is None:
            return
        attributes: Attributes = {
            "gateway.replica": self.replica_id,
            "gateway.attempt": self.attempt_no,
            "gateway.breaker_state": self.breaker_state,
            "gateway.outcome": outcome.kind.value,
        }
        if outcome.status is not None:
            attributes["http.response.status_code"] = outcome.status
        status = UNSET
        if outcome.kind not in _NOT_FAILED:
            attributes["error.type"] = outcome.kind.value
            status = Status(StatusCode.ERROR, outcome.describe())
        ids = (self._trace_id, self.span_id, self._parent_id, False)
        times = (self._start_ns, time.time_ns())
        self._recorder.record("attempt", SpanKind.CLIENT, ids, times, attributes, status)


class UnrecordedAttempt:
    """An attempt of a request that is not recorded: it carries the request's context on."""

    __slots__ = ("traceparent", "tracestate")

    def __init__(self, traceparent: str, tracestate: str | None) -> None:
        self.traceparent = traceparent
        self.tracestate = tracestate

    def inject(self, carrier: dict[str, str] | None = None) -> dict[str, str]:
        return _inject(carrier, self.traceparent, self.tracestate)

    def end(self, outcome: Outcome) -> None:
        return None


class UntracedRequest:
    """Tracing disabled: originate and echo nothing, forward the caller's context as it came
    when it is valid (a ``tracestate`` only beside a valid ``traceparent``, as W3C says), and
    nothing of it otherwise (`gateway.telemetry.tracecontext`)."""

    __slots__ = ("_forward",)
    trace_id = None
    traceparent = None

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._forward: dict[str, str] = {}
        traceparent = clean_traceparent(headers.get(TRACEPARENT))
        if traceparent is not None:
            self._forward[TRACEPARENT] = traceparent
            tracestate = clean_tracestate(headers.get(TRACESTATE))
            if tracestate is not None:
                self._forward[TRACESTATE] = tracestate

    def attempt(self, replica_id: str, attempt_no: int, breaker_state: str) -> UntracedRequest:
        return self

    def inject(self, carrier: dict[str, str] | None = None) -> dict[str, str]:
        if carrier is None:
            return dict(self._forward)
        carrier.update(self._forward)
        return carrier

    def set(self, key: str, value: AttributeValue) -> None:
        return None

    def end(self, *args: object, **kwargs: object) -> None:
        return None


def _inject(
    carrier: dict[str, str] | None, traceparent: str, tracestate: str | None
) -> dict[str, str]:
    if carrier is None:
        carrier = {}
    carrier[TRACEPARENT] = traceparent
    if tracestate is not None:
        carrier[TRACESTATE] = tracestate
    return carrier

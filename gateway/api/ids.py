"""Every answer carries ``x-request-id`` and, with tracing on, ``traceparent``.

The infer path sets both itself (its span is the request's); this module wraps the rest of the
gateway (health, metadata, control plane), with the infer path's request id rule
(`gateway.v2.identity.request_id_of`), so an operator can match any answer to its log lines and
trace. Routes other than infer record no span: they continue the caller's trace (or start one)
under a new span id, unsampled, so a probe or a scrape never floods the trace backend.
"""

from __future__ import annotations

from typing import Any

from gateway.api.responses import Receive, Scope, Send
from gateway.telemetry.tracecontext import (
    format_traceparent,
    new_span_id,
    new_trace_id,
    parse_traceparent,
)
from gateway.v2.identity import request_id_of

REQUEST_ID = "x-request-id"


def id_lines(given_id: str | None, given_parent: str | None, tracing: bool) -> bytes:
    """An answer's ``x-request-id`` line (the client's, when it is one, else a new one) and,
    with tracing on, a ``traceparent`` line continuing the client's trace (as `AnswerIds`
    adds them to every answer of the FastAPI side)."""
    lines = b"x-request-id: %s\r\n" % request_id_of(given_id).encode()
    if tracing:
        parent = parse_traceparent(given_parent)
        trace_id = parent.trace_id if parent is not None else new_trace_id()
        sampled = parent.sampled if parent is not None else False
        traceparent = format_traceparent(trace_id, new_span_id(), sampled)
        lines += b"traceparent: %s\r\n" % traceparent.encode()
    return lines


class AnswerIds:
    """ASGI wrapper: adds ``x-request-id`` (and ``traceparent`` when tracing is on)."""

    def __init__(self, app: Any, tracing: bool) -> None:
        self._app = app
        self._tracing = tracing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        given_id = given_parent = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                given_id = value.decode("latin-1")
            elif name == b"traceparent":
                given_parent = value.decode("latin-1")
        extra = [(b"x-request-id", request_id_of(given_id).encode())]
        if self._tracing:
            parent = parse_traceparent(given_parent)
            trace_id = parent.trace_id if parent is not None else new_trace_id()
            sampled = parent.sampled if parent is not None else False
            extra.append(
                (b"traceparent", format_traceparent(trace_id, new_span_id(), sampled).encode())
            )

        async def send_with_ids(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0] not in _OURS]
                message = {**message, "headers": [*headers, *extra]}
            await send(message)

        await self._app(scope, receive, send_with_ids)


_OURS = frozenset({b"x-request-id", b"traceparent"})

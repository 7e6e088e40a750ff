"""Every answer carries ``x-request-id`` and, with tracing on, ``traceparent``.

The infer path sets both itself (its span is the request's); this module gives the request id
rule to it and wraps the rest of the gateway (health, metadata, control plane) so an operator
can match any answer to its log lines and trace. A caller's ``x-request-id`` is echoed when it
is a sane token (at most 128 visible ASCII characters), else the gateway makes one. Routes
other than infer record no span: they continue the caller's trace (or start one) under a new
span id, unsampled, so a probe or a scrape never floods the trace backend.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

from gateway.api.responses import Receive, Scope, Send
from gateway.telemetry.tracecontext import (
    format_traceparent,
    new_span_id,
    new_trace_id,
    parse_traceparent,
)

REQUEST_ID = "x-request-id"
_SANE = re.compile(r"[\x21-\x7e]{1,128}")
_ids = itertools.count(1)
_prefix = f"{os.getpid():x}-"


def request_id_of(given: str | None) -> str:
    """The caller's request id when it is a sane token, else a new one."""
    if given is not None and _SANE.fullmatch(given):
        return given
    return f"{_prefix}{next(_ids)}"


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

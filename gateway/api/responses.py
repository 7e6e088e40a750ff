"""Raw ASGI response helpers for the hot path: JSON bodies and the one error format.

Every error leaves the gateway as ``{"error": "..."}`` with the status its `GatewayError`
class carries; this module is the only place that renders one on the raw ASGI path.

`send_lines` sends an answer whose header lines the gateway built as ASGI messages. Only
values the gateway made, or checked here (`checked`), go into such lines.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gateway.errors import GatewayError

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]
Scope = MutableMapping[str, Any]

JSON = b"application/json"
_JSON_LINE = b"content-type: " + JSON + b"\r\n"
# What uvicorn refuses in a header value (its HEADER_VALUE_RE): control bytes but tab.
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")


def checked(value: bytes) -> bytes:
    """``value`` for a header line, when it came from a replica or a client (ValueError if it
    holds a control byte: uvicorn would refuse it as well)."""
    if _BAD_VALUE.search(value) is not None:
        raise ValueError(f"invalid header value {value[:64]!r}")
    return value


async def send_lines(send: Send, scope: Scope, status: int, lines: bytes, body: bytes) -> None:
    """An answer whose ``lines`` (``name: value`` CRLF each, no content-length) the gateway
    built, as ASGI messages."""
    headers = [tuple(line.split(b": ", 1)) for line in lines.split(b"\r\n") if line]
    await send_bytes(send, status, body, headers)  # type: ignore[arg-type]


async def send_bytes(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, payload: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    all_headers = [(b"content-type", JSON), *(headers or [])]
    await send_bytes(send, status, orjson.dumps(payload), all_headers)


def error_answer(error: GatewayError, lines: bytes) -> tuple[bytes, bytes]:
    """``error`` as its answer's header lines (JSON, its own headers, `checked`, then the
    ``lines`` the gateway built) and its body ``{"error": ...}``; the status is its own."""
    own = b"".join(
        b"%s: %s\r\n" % (name.encode(), checked(value.encode()))
        for name, value in error.headers().items()
    )
    return _JSON_LINE + own + lines, orjson.dumps({"error": error.message})


async def send_error(send: Send, scope: Scope, error: GatewayError, lines: bytes) -> None:
    """``error`` as ``{"error": ...}`` with its status, its own headers (`checked`) and the
    header ``lines`` the gateway built (as `send_lines`: one write where the protocol offers
    it, past uvicorn's per-header validation)."""
    head, body = error_answer(error, lines)
    await send_lines(send, scope, error.status, head, body)

"""Raw ASGI response helpers for the hot path: JSON bodies and the one error format.

Every error leaves the gateway as ``{"error": "..."}`` with the status its `GatewayError`
class carries; this module is the only place that renders one on the raw ASGI path.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gateway.errors import GatewayError

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
Receive = Callable[[], Awaitable[Message]]
Scope = MutableMapping[str, Any]

JSON = b"application/json"


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


async def send_error(
    send: Send, error: GatewayError, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    extra = [(k.encode(), v.encode()) for k, v in error.headers().items()]
    await send_json(send, error.status, {"error": error.message}, [*extra, *(headers or [])])

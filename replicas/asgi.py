"""Minimal ASGI plumbing for the replica: response value, body reading, header lookup, sending.

The replica is a raw ASGI app so the infer path pays for nothing it does not use; these few
helpers are all the "framework" it needs, kept apart so the server module reads as routes only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

from replicas.errors import PayloadTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = "application/json"


class ClientDisconnected(Exception):
    """The client went away before its request body arrived."""


@dataclass(slots=True)
class Response:
    """A whole response; ``after`` runs once it has been handed to the server."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: Mapping[str, str] | None = None
    after: Callable[[], None] | None = None


def json_response(obj: Any, status: int = 200, after: Callable[[], None] | None = None) -> Response:
    return Response(status, orjson.dumps(obj), after=after)


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, orjson.dumps({"error": message}), headers=headers)


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower-case bytes), or None."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body; `PayloadTooLarge` past ``limit`` bytes."""
    declared = header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"request body of {declared} bytes exceeds the {limit}-byte limit")
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            raise PayloadTooLarge(f"request body exceeds the {limit}-byte limit")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def send_response(send: Send, response: Response) -> None:
    headers = [
        (b"content-type", response.content_type.encode()),
        (b"content-length", str(len(response.body)).encode()),
    ]
    if response.headers:
        headers.extend((k.encode(), v.encode()) for k, v in response.headers.items())
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})

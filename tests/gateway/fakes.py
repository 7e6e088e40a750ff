"""Fakes for fast unit tests of the gateway: a scripted transport (no network)."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

import orjson

from gateway.clock import Clock
from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamTimeout
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.v2.body import Body, as_bytes

Behaviour = Callable[[str, str, bytes], Awaitable[Reply]]


def reply(
    status: int = 200, body: bytes = b'{"model_name":"m","outputs":[]}', *, echo_id: bool = True
) -> Behaviour:
    """Answers ``body``; a 200 carries the request's V2 id, as a V2 server returns it, unless
    ``body`` has an id of its own or ``echo_id`` is False (a server that never echoes it)."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        sent = with_echoed_id(payload, body) if echo_id and status == 200 else body
        return Reply(status, {"content-type": "application/json"}, sent)

    return behave


def with_echoed_id(request: bytes, body: bytes) -> bytes:
    """``body`` (a JSON object) carrying the ``id`` of ``request`` (a V2 infer body, JSON or a
    JSON header before binary tensors); as it is when either has no id or is not JSON."""
    try:
        header, _ = json.JSONDecoder().raw_decode(request.decode("latin-1"))
        reply = orjson.loads(body)
    except (ValueError, orjson.JSONDecodeError):
        return body
    if not isinstance(header, dict) or "id" not in header:
        return body
    if not isinstance(reply, dict) or "id" in reply:
        return body
    start = body.index(b"{") + 1
    separator = b"," if reply else b""
    return body[:start] + b'"id":' + orjson.dumps(header["id"]) + separator + body[start:]


def fail(error: Exception) -> Behaviour:
    async def behave(method: str, path: str, payload: bytes) -> Reply:
        raise error

    return behave


def hang() -> Behaviour:
    async def behave(method: str, path: str, payload: bytes) -> Reply:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return behave


class FakeTransport:
    """Answers by endpoint authority (``host:port``) with a scripted behaviour."""

    name = "fake"

    def __init__(
        self, behaviours: Mapping[str, Behaviour] | None = None, *, clock: Clock | None = None
    ) -> None:
        self.behaviours: dict[str, Behaviour] = dict(behaviours or {})
        self.calls: dict[str, list[str]] = defaultdict(list)
        self.closed = False
        self.forgotten: list[Endpoint] = []  # endpoints whose replica left, in order
        self.clock = clock  # whose time the timeout runs on; None: the event loop's

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes | Body = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Reply:
        body = as_bytes(body)
        self.calls[endpoint.authority].append(f"{method} {path}")
        behave = self.behaviours.get(endpoint.authority, reply())
        try:
            if self.clock is None:
                return await asyncio.wait_for(behave(method, path, body), timeout)
            async with self.clock.timeout_at(self.clock.now() + timeout):
                return await behave(method, path, body)
        except TimeoutError as exc:  # as a real transport does
            raise UpstreamTimeout(f"no reply within {timeout:.3f} s") from exc

    def forget(self, endpoint: Endpoint) -> None:
        self.forgotten.append(endpoint)

    async def aclose(self) -> None:
        self.closed = True

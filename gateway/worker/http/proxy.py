"""A handler that forwards a request to an HTTP/1.1 server on a Unix socket and streams back.

A worker serves the data plane's paths itself and hands every other one (``/metrics``,
``/admin/...``, the dashboard, ``/slo``, the OpenAPI pages) to the control process, whose
uvicorn listens on a Unix socket: `UnixProxy` is the router's fallback for that.

- **Headers** (RFC 9110 7.6.1): the hop-by-hop fields (``connection``, the ones it names,
  ``keep-alive``, ``proxy-connection``, ``te``, ``trailer``, ``transfer-encoding``,
  ``upgrade``) are not forwarded either way, nor ``expect`` (this server answers it) nor the
  framing (each side's own is written). ``host`` goes as the client sent it, so the control
  plane checks it as before. The client's address goes in `PEER_HEADER`, replacing any the
  client sent: the control plane may trust it because it listens only on the socket.
- **Bodies** stream both ways, never whole in memory: the request's chunks are written as
  they are read (waiting while the socket's buffer is full), the answer's as they come
  (waiting while the client's is); an answer of unknown length goes chunked (or to the close
  for an HTTP/1.0 client).
- **Failures**: the socket unreachable or every connection busy past ``connect_timeout_s``:
  503 with ``Retry-After``; the server closing or breaking the protocol before its head: 502;
  no head in ``answer_timeout_s``: 504; a gap of ``answer_timeout_s`` in a body, or the server
  gone mid-answer: the client's connection is cut, so it never takes a short answer for a
  whole one. A pooled connection the server closed while it idled is retried once on a new
  one, for a request without a body.
- **Held answers**: an answer the control plane marks with `HOLD_HEADER` (a wrong key's 401,
  delayed per client address by `gateway.api.auth_failures`) is read whole (at most
  `MAX_HELD_BYTES`), its connection given back at once, and written to the client only after
  that many seconds on the injected clock: the delay holds the client's own exchange, never
  one of the pool's few connections that every client's control-plane request shares. The
  field is never forwarded from a client nor returned to one.
- Upgrades and CONNECT are not forwarded: 501.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass

from gateway.clock import Clock, MonotonicClock
from gateway.worker.http.answer import Answer
from gateway.worker.http.proxy_pool import ProxyConnection, ProxyPool, UpstreamGone
from gateway.worker.http.request import Request

log = logging.getLogger(__name__)

PEER_HEADER = b"x-gateway-peer"
# on the control plane's answer: seconds to hold it before the client has it
HOLD_HEADER = b"x-gateway-hold-s"
# a held answer is read whole first: an error's few lines
MAX_HELD_BYTES = 64 * 1024
# RFC 9110 7.6.1's hop-by-hop fields, and what each side frames or answers for itself
_NOT_FORWARDED = frozenset(
    (
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"expect",
        PEER_HEADER,
        HOLD_HEADER,
    )
)
_NOT_RETURNED = frozenset(
    (
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"content-length",
        b"date",
        HOLD_HEADER,
    )
)
_RETRY_AFTER = b"retry-after: 1\r\n"


@dataclass(frozen=True, slots=True)
class Held:
    """An answer read whole, for the client after ``seconds``."""

    seconds: float
    status: int
    lines: bytes
    body: bytes

    async def write(self, answer: Answer) -> None:
        answer.start(self.status, self.lines, len(self.body))
        await answer.write(self.body)
        answer.end()


class UnixProxy:
    def __init__(
        self,
        path: str,
        *,
        connections: int = 4,
        idle_s: float = 4.0,
        connect_timeout_s: float = 2.0,
        answer_timeout_s: float = 60.0,
        max_head_bytes: int = 64 * 1024,
        clock: Clock | None = None,
    ) -> None:
        """``path``: the server's socket; ``connections``: how many exchanges at once;
        ``clock``: what a held answer waits on."""
        self.pool = ProxyPool(path, connections, idle_s, connect_timeout_s, max_head_bytes)
        self._answer_timeout_s = answer_timeout_s
        self._clock = clock or MonotonicClock()

    async def __call__(self, request: Request, answer: Answer) -> None:
        if request.method == "CONNECT" or request.header(b"upgrade") is not None:
            answer.send_error(501, "protocol upgrades and CONNECT are not forwarded")
            return
        head = _request_head(request)
        bodied = request.header(b"content-length") is not None or _chunked(request)
        for attempt in (1, 2):
            try:
                conn = await self.pool.take(request.peer)
            except (TimeoutError, OSError) as exc:
                log.warning("control plane unreachable at %s: %s", self.pool.path, exc)
                answer.send_error(503, "the control plane is unavailable", _RETRY_AFTER)
                return
            reused = conn.used
            try:
                done, held = await self._exchange(conn, head, request, answer, bodied)
            except UpstreamGone as exc:
                self.pool.give(conn, request.peer, reuse=False)
                if reused and attempt == 1 and not bodied and not answer.started:
                    # it closed while idle: once more on a new connection
                    continue
                if not answer.started:
                    answer.send_error(502, f"the control plane failed to answer: {exc}")
                else:
                    answer.abort()
                return
            except BaseException:
                self.pool.give(conn, request.peer, reuse=False)
                raise
            self.pool.give(conn, request.peer, reuse=done)
            if held is not None:
                # the connection is back in the pool: only this client waits
                await self._clock.sleep(held.seconds)
                await held.write(answer)
            return

    async def _exchange(
        self, conn: ProxyConnection, head: bytes, request: Request, answer: Answer, bodied: bool
    ) -> tuple[bool, Held | None]:
        """One exchange; True if the connection may carry another, and the answer if it is
        to be held (then not yet written)."""
        conn.send(head)
        sender = asyncio.ensure_future(_send_body(conn, request)) if bodied else None
        held = None
        try:
            if not await self._head(conn, sender):
                answer.send_error(504, "the control plane did not answer in time")
                return False, None
            seconds = _hold_of(conn.headers)
            if seconds is None:
                await self._answer(conn, answer)
            else:
                held = Held(
                    seconds, conn.status, _answer_lines(conn.headers), await self._read(conn)
                )
        finally:
            if sender is not None and not sender.done():
                # answered before the whole body went: the connection ends
                sender.cancel()
                conn.reusable = False
        # cancelled above it is not done yet: asking its exception then would raise
        if sender is not None and (
            not sender.done() or sender.cancelled() or sender.exception() is not None
        ):
            return False, held
        return conn.reusable, held

    async def _head(self, conn: ProxyConnection, sender: asyncio.Future[None] | None) -> bool:
        """Waits for the answer's head while the body goes; False if none came in time.

        The client's body failing (the server answered 408 or 413 for it) ends the exchange
        with that error; the socket failing while the body goes leaves the head to say how
        the server answered, if it did."""
        head = conn.head_future
        waiting: set[asyncio.Future[None]] = {head} if sender is None else {head, sender}
        deadline = asyncio.get_running_loop().time() + self._answer_timeout_s
        while not head.done():
            left = deadline - asyncio.get_running_loop().time()
            done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                return False
            if sender is not None and sender in done:
                waiting.discard(sender)
                error = sender.exception()
                if error is not None and not isinstance(error, UpstreamGone):
                    raise error
        # `UpstreamGone` when the connection ended first
        head.result()
        return True

    async def _answer(self, conn: ProxyConnection, answer: Answer) -> None:
        lines = _answer_lines(conn.headers)
        declared = _value(conn.headers, b"content-length")
        chunked = _value(conn.headers, b"transfer-encoding") is not None
        length = int(declared) if declared is not None and not chunked else None
        answer.start(conn.status, lines, length)
        async with aclosing(self._body(conn)) as body:
            async for chunk in body:
                await answer.write(chunk)
        answer.end()

    async def _read(self, conn: ProxyConnection) -> bytes:
        """The whole answer's body, at most `MAX_HELD_BYTES`."""
        chunks: list[bytes] = []
        size = 0
        async with aclosing(self._body(conn)) as body:
            async for chunk in body:
                size += len(chunk)
                if size > MAX_HELD_BYTES:
                    raise UpstreamGone("the control plane's held answer is too large")
                chunks.append(chunk)
        return b"".join(chunks)

    async def _body(self, conn: ProxyConnection) -> AsyncGenerator[bytes, None]:
        """The answer's body as it arrives, each piece within the answer timeout."""
        more = True
        while more:
            try:
                async with asyncio.timeout(self._answer_timeout_s):
                    chunk, more = await conn.read()
            except TimeoutError:
                raise UpstreamGone("the control plane stalled mid-answer") from None
            yield chunk


def _hold_of(headers: list[tuple[bytes, bytes]]) -> float | None:
    """`HOLD_HEADER`'s seconds (None: answer at once; so is a value that is no number)."""
    value = _value(headers, HOLD_HEADER)
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _answer_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The answer's header lines the client is given."""
    named = _connection_named(headers)
    return b"".join(
        b"%s: %s\r\n" % (name, value)
        for name, value in headers
        if name not in _NOT_RETURNED and name not in named
    )


async def _send_body(conn: ProxyConnection, request: Request) -> None:
    """The request's body as it is read; chunked again when the client sent it chunked."""
    chunked = _chunked(request)
    more = True
    while more:
        chunk, more = await request.read()
        if chunked:
            if chunk:
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if not more:
                conn.send(b"0\r\n\r\n")
        elif chunk:
            conn.send(chunk)
        await conn.drained()


def _request_head(request: Request) -> bytes:
    named = _connection_named(request.headers)
    lines = [
        b"%s: %s\r\n" % (name, value)
        for name, value in request.headers
        if name not in _NOT_FORWARDED and name not in named
    ]
    if _chunked(request):
        lines.append(b"transfer-encoding: chunked\r\n")
    else:
        declared = request.header(b"content-length")
        if declared is not None:
            lines.append(b"content-length: %s\r\n" % declared.strip())
    target = request.raw_path + (b"?" + request.query if request.query else b"")
    return b"%s %s HTTP/1.1\r\n%s%s: %s\r\n\r\n" % (
        request.method.encode(),
        target,
        b"".join(lines),
        PEER_HEADER,
        request.peer.encode(),
    )


def _chunked(request: Request) -> bool:
    # the server lets only chunked in
    return request.header(b"transfer-encoding") is not None


def _connection_named(headers: list[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """The fields a ``connection`` header names: hop-by-hop too (RFC 9110 7.6.1)."""
    named = [value for name, value in headers if name == b"connection"]
    if not named:
        return frozenset()
    return frozenset(token.strip().lower() for value in named for token in value.split(b","))


def _value(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None

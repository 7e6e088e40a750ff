"""`Http1Transport`: the lean HTTP/1.1 keep-alive client that proxies requests to replicas.

Why: the upstream client is most of the gateway's CPU per request. This client is the cheapest
of those ``loadtests/bench_transport.py`` compares (aiohttp, httpx; the figures:
docs/measured.md, Upstream transports), because it does only what the hop needs: a pool of idle
connections per endpoint, one ``write`` per request, httptools to parse the reply. An
``https`` endpoint gets TLS from asyncio (one ``SSLContext`` per TLS settings, built on first
use); the connections are kept per endpoint, so TLS and plaintext ones never mix.

Each endpoint has two lanes of connections (the contract in `gateway.upstream.transport.base`):
control requests (GET, HEAD: health probes, metadata) never ride a connection that carried an
infer request, whose late answer they could read as theirs (they carry no id to catch it). The
control lane costs one more connection per replica, kept open while probes come more often
than the server's idle timeout (loadtests/bench_control_lane.py; docs/any-v2-server.md).
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections import deque
from collections.abc import Mapping

from gateway.config.endpoint import Endpoint
from gateway.config.tls import TlsConfig
from gateway.errors import UpstreamConnectError, UpstreamTimeout
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.upstream.transport.http1_connection import Connection
from gateway.upstream.transport.limits import (
    MAX_REPLY_BODY_BYTES,
    MAX_REPLY_HEADER_BYTES,
    MAX_REPLY_HEADER_COUNT,
    ReplyLimits,
)
from gateway.upstream.transport.local_errors import local_error
from gateway.upstream.transport.tls import client_context, handshake_error
from gateway.v2.body import SMALL_BODY_BYTES, Body, Piece

# Framing is ours: extra headers with these names are dropped rather than sent twice.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding"})
_BODILESS = frozenset({"GET", "HEAD"})
# the methods of the control lane
_CONTROL = _BODILESS
# a probe and a metadata fetch at once; more are rare
MAX_IDLE_CONTROL = 2
# From this size a body's pieces are written as they are (writev) rather than copied behind
# the head into one buffer: below it, the copy costs less than the vector.
VECTORED_MIN_BYTES = SMALL_BODY_BYTES


class _Route:
    """One endpoint's connections in one lane: the idle ones and the exchange slots.

    The slots are a counter and a queue of waiters rather than an `asyncio.Semaphore`: the
    usual exchange finds a free slot, and taking and giving it back are then two additions,
    where the semaphore's acquire and release cost a dozen calls (loadtests/bench_calls.py).
    A slot given back goes to the oldest waiter still waiting, so waiters are served in order.
    """

    __slots__ = ("forgotten", "free", "idle", "waiters")

    def __init__(self, slots: int) -> None:
        self.idle: list[Connection] = []
        self.free = slots
        self.waiters: deque[asyncio.Future[None]] = deque()
        # its replica left (`Http1Transport.forget`): pool nothing more
        self.forgotten = False

    def give_back(self) -> None:
        """An exchange's slot is free: to the oldest waiter still waiting, else counted."""
        waiters = self.waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


class _Lane:
    """One kind of traffic's connections, per endpoint."""

    __slots__ = ("max_idle", "routes")

    def __init__(self, max_idle: int) -> None:
        self.routes: dict[Endpoint, _Route] = {}
        self.max_idle = max_idle


def encode_request(
    endpoint: Endpoint,
    method: str,
    path: str,
    body: bytes | Body,
    headers: Mapping[str, str] | None,
) -> bytes | list[Piece]:
    """The request head and body as the bytes of a single write: one buffer, or for a large
    `Body` the head then the body's own pieces, written as one vectored write (no copy).

    Host and the pool's extra headers come from the endpoint (`Endpoint.fixed_head`). The head
    is built by concatenation, not a list of lines: this runs on every attempt, and a small
    request's head is a handful of lines (loadtests/bench_calls.py counts its calls)."""
    pieces: tuple[Piece, ...] | None = None
    data = b""
    if isinstance(body, Body):
        size = body.size
        if size >= VECTORED_MIN_BYTES:
            pieces = body.pieces
        else:
            data = body.joined()
    else:
        data = body
        size = len(data)
    # Every line ends in exactly one CRLF: a CR or LF inside the request line or a header
    # would smuggle a header or a second request, so refuse it (a caller bug, hence
    # ValueError). The endpoint's part is checked where the endpoint is built; here, what the
    # caller gave, each piece searched with ``in`` (no argument parsing, one scan each).
    line = f"{method} {endpoint.prefix}{path}"
    if "\r" in line or "\n" in line:
        raise ValueError("CR or LF in request line or header")
    head = f"{line} HTTP/1.1\r\n{endpoint.fixed_head}"
    if size or method not in _BODILESS:
        head += f"content-length: {size}\r\n"
    if headers:
        for name, value in headers.items():
            if name not in _OWN_HEADERS:
                field = f"{name}: {value}"
                if "\r" in field or "\n" in field:
                    raise ValueError("CR or LF in request line or header")
                head += f"{field}\r\n"
    head += "\r\n"
    if pieces is not None:
        return [head.encode("latin-1"), *pieces]
    return head.encode("latin-1") + data


class Http1Transport:
    """HTTP/1.1 keep-alive client over asyncio Protocols and httptools.

    Per endpoint and lane (infer; control: GET and HEAD): at most
    ``max_connections_per_endpoint`` exchanges in flight (more wait for a free slot within their
    timeout), and at most ``max_idle_per_endpoint`` idle connections kept (control:
    `MAX_IDLE_CONTROL`), most recently used first (hot connections stay hot, cold ones close at
    the server's idle timeout). An idle connection is reused only if nothing arrived on it while
    idle, never after its reply was discarded, and never for an endpoint that is not
    ``keep_alive`` (one exchange per connection). Each reply is capped by the ``max_reply_*``
    limits (see `ReplyLimits`).
    """

    name = "fast"

    def __init__(
        self,
        *,
        max_connections_per_endpoint: int = 256,
        max_idle_per_endpoint: int = 64,
        connect_timeout_s: float = 1.0,
        max_reply_header_count: int = MAX_REPLY_HEADER_COUNT,
        max_reply_header_bytes: int = MAX_REPLY_HEADER_BYTES,
        max_reply_body_bytes: int = MAX_REPLY_BODY_BYTES,
    ) -> None:
        self._limits = ReplyLimits(
            max_reply_header_count, max_reply_header_bytes, max_reply_body_bytes
        )
        self._max_connections = max_connections_per_endpoint
        self._connect_timeout = connect_timeout_s
        self._infer = _Lane(max_idle_per_endpoint)
        self._control = _Lane(min(MAX_IDLE_CONTROL, max_idle_per_endpoint))
        self._open: set[Connection] = set()
        self._contexts: dict[TlsConfig, ssl.SSLContext] = {}
        self._closed = False

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
        raw = encode_request(endpoint, method, path, body, headers)
        head = method == "HEAD"
        deadline = asyncio.get_running_loop().time() + timeout
        lane = self._control if method in _CONTROL else self._infer
        route = lane.routes.get(endpoint)
        if route is None:
            route = lane.routes[endpoint] = _Route(self._max_connections)
        if route.free and not route.waiters:
            # the usual case: a slot is free, no await
            route.free -= 1
        else:
            await _wait_for_slot(route, deadline)
        try:
            conn = _pop_idle(route) if endpoint.keep_alive else None
            if conn is not None:
                try:
                    return await self._exchange(
                        lane, route, endpoint, conn, raw, deadline, head, room
                    )
                except UpstreamConnectError:
                    # The server may close a keep-alive connection while it sits idle in our pool
                    # (its idle timeout, a restart); we then see EOF or a reset before any reply
                    # byte. As browsers, Go's net/http and urllib3 do, retry such a failure once
                    # on a fresh connection. Never when any reply byte arrived, never on a fresh
                    # connection, never on a timeout: those go to the retry policy above us.
                    if conn.got_bytes:
                        raise
            conn = await self._connect(endpoint, deadline)
            return await self._exchange(lane, route, endpoint, conn, raw, deadline, head, room)
        finally:
            if route.waiters:
                route.give_back()
            else:
                route.free += 1

    def forget(self, endpoint: Endpoint) -> None:
        """The endpoint's replica left: close its idle connections and drop what was kept for it.

        Without this, every replica that ever left (DNS discovery, pod churn) would keep up to
        ``max_idle_per_endpoint`` sockets and its slot counter for the life of the process. An
        exchange still in flight to it finishes normally; its connection is then closed, not
        pooled. A later request to the same endpoint (the replica came back) starts afresh.
        """
        for lane in (self._infer, self._control):
            route = lane.routes.pop(endpoint, None)
            if route is not None:
                route.forgotten = True
                for conn in route.idle:
                    conn.close()
                route.idle.clear()

    def pooled(self, endpoint: Endpoint, *, control: bool = False) -> int:
        """Idle connections kept for ``endpoint``'s infer (or ``control``) lane that may carry
        another exchange (for `/admin/state` and tests)."""
        route = (self._control if control else self._infer).routes.get(endpoint)
        return 0 if route is None else sum(conn.reusable for conn in route.idle)

    async def aclose(self) -> None:
        """Close every connection, idle or busy; a busy exchange fails with a connect error."""
        self._closed = True
        for conn in list(self._open):
            conn.abort()
        for lane in (self._infer, self._control):
            for route in lane.routes.values():
                route.idle.clear()
        # let the loop run the connection_lost callbacks
        await asyncio.sleep(0)

    # --- internals ------------------------------------------------------------------------------

    async def _exchange(
        self,
        lane: _Lane,
        route: _Route,
        endpoint: Endpoint,
        conn: Connection,
        raw: bytes | list[Piece],
        deadline: float,
        head: bool,
        room: AnswerRoom | None,
    ) -> Reply:
        try:
            response = await conn.exchange(raw, deadline, head=head, room=room)
        except BaseException:
            # an error, a timeout or our cancellation: never reuse it
            conn.abort()
            raise
        if conn.reusable and endpoint.keep_alive and not route.forgotten:
            idle = route.idle
            if len(idle) < lane.max_idle:
                idle.append(conn)
                return response
        conn.close()
        return response

    def _new_connection(self, loop: asyncio.AbstractEventLoop) -> Connection:
        conn = Connection(loop, self._open.discard, self._limits)
        self._open.add(conn)
        return conn

    def _context(self, tls: TlsConfig) -> ssl.SSLContext:
        context = self._contexts.get(tls)
        if context is None:
            # reads the CA bundle and the client certificate once
            context = self._contexts[tls] = client_context(tls)
        return context

    async def _connect(self, endpoint: Endpoint, deadline: float) -> Connection:
        if self._closed:
            raise UpstreamConnectError("transport is closed")
        loop = asyncio.get_running_loop()
        # the handshake included
        limit = min(deadline, loop.time() + self._connect_timeout)
        made: list[Connection] = []

        def factory() -> Connection:
            made.append(self._new_connection(loop))
            return made[-1]

        tls = endpoint.tls
        try:
            async with asyncio.timeout_at(limit):
                if tls is None:
                    _, conn = await loop.create_connection(factory, endpoint.host, endpoint.port)
                else:
                    _, conn = await loop.create_connection(
                        factory,
                        endpoint.host,
                        endpoint.port,
                        ssl=self._context(tls),
                        server_hostname=endpoint.server_name,
                    )
        except BaseException as exc:
            for failed in made:
                # a failed handshake never reports the connection lost
                self._open.discard(failed)
            if isinstance(exc, TimeoutError):
                what = "connect" if tls is None else "connect and TLS handshake"
                raise UpstreamConnectError(f"{what} timed out") from exc
            if isinstance(exc, ssl.SSLError):
                raise handshake_error(exc) from exc
            # the gateway's own lack of descriptors or memory
            local = local_error(exc)
            if local is not None:
                raise local from exc
            if isinstance(exc, OSError):
                raise UpstreamConnectError(f"cannot connect: {_reason(exc)}") from exc
            raise
        return conn


async def _wait_for_slot(route: _Route, deadline: float) -> None:
    """Wait in line for one of ``route``'s slots, until ``deadline`` (loop time)."""
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    route.waiters.append(waiter)
    try:
        async with asyncio.timeout_at(deadline):
            await waiter
    except BaseException as exc:
        if waiter.done() and not waiter.cancelled():
            # handed a slot as the timeout or a cancellation struck: pass it on
            route.give_back()
        else:
            # `give_back` skips it
            waiter.cancel()
        if isinstance(exc, TimeoutError):
            raise UpstreamTimeout("no free connection in time (all busy)") from exc
        raise


def _pop_idle(route: _Route) -> Connection | None:
    idle = route.idle
    while idle:
        conn = idle.pop()
        if conn.reusable and not conn.has_unread_input():
            return conn
        # Closed or discarded, or bytes arrived while it sat idle that the loop has not delivered
        # yet (a late or unsolicited reply, or the server's close): read as our reply otherwise.
        conn.abort()
    return None


def _reason(exc: OSError) -> str:
    """Why a connect failed, without the address (the socket layer's text names it): a client
    may read the message, and the replica's id says where it was; its url is in /admin/state."""
    if exc.errno:
        return os.strerror(exc.errno)
    # asyncio's "Multiple exceptions: ..." names every address
    return type(exc).__name__

"""Kept-alive HTTP/1.1 connections to one server on a Unix socket, for the forwarding handler.

`ProxyPool` holds at most ``size`` connections, idle ones for at most ``idle_s`` (less than
the server's own keep-alive timeout, so that a connection is rarely taken just as the server
closes it); a request finds an idle one or opens one, and waits for a free slot when all are
busy. One client address holds at most half of the slots at once (`PeerSlots`): a client that
sends many requests at once waits for its own, and the others still find a free slot.
`ProxyConnection` sends a request's head and body as it is given them, waiting while its
transport holds more than `HIGH_WATER_BYTES` (the server reads slowly), and hands the answer
over as httptools parses it: the head once complete (interim 1xx answers skipped), then the
body's chunks, reading paused while more than `HIGH_WATER_BYTES` wait unread (the client reads
slowly). A connection goes back to the pool only after a whole exchange that leaves it
kept alive with nothing more sent.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque

import httptools

HIGH_WATER_BYTES = 256 * 1024


class UpstreamGone(Exception):
    """The connection ended (or broke the protocol) before the answer was whole."""


class ProxyConnection(asyncio.Protocol):
    def __init__(self, max_head_bytes: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpResponseParser(self)
        self._max_head_bytes = max_head_bytes
        self.transport: asyncio.Transport | None = None
        self.reusable = False
        # it has carried an exchange
        self.used = False
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._head = self._new_head()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._ended = False
        self._lost: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._paused = False

    # --- the exchange's side ----------------------------------------------------------

    def send(self, data: bytes | memoryview) -> None:
        if self.transport is None or self._lost is not None:
            raise UpstreamGone("the connection to the control plane is closed")
        self.transport.write(data)

    async def drained(self) -> None:
        """Returns once the transport holds at most `HIGH_WATER_BYTES` unsent."""
        transport = self.transport
        while (
            transport is not None
            and self._lost is None
            and transport.get_write_buffer_size() > HIGH_WATER_BYTES
        ):
            self._drained = self._loop.create_future()
            await self._drained

    @property
    def head_future(self) -> asyncio.Future[None]:
        """Done once the answer's final head (`status`, `headers`) is in, or with
        `UpstreamGone` if the connection ended first."""
        return self._head

    async def read(self) -> tuple[bytes, bool]:
        """The answer body's next chunk and whether more follow."""
        while not self._chunks:
            if self._ended:
                return b"", False
            if self._lost is not None:
                raise UpstreamGone(str(self._lost))
            self._waiter = self._loop.create_future()
            await self._waiter
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._paused and self._buffered <= HIGH_WATER_BYTES and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk, bool(self._chunks) or not self._ended

    def begin(self) -> None:
        """A new exchange on this connection."""
        self.used = True
        self.reusable = False
        self.status = 0
        self.headers = []
        self._head_bytes = 0
        self._head = self._new_head()
        self._chunks.clear()
        self._buffered = 0
        self._ended = False

    @property
    def open(self) -> bool:
        """Still open and fit for another exchange."""
        transport = self.transport
        return self.reusable and transport is not None and not transport.is_closing()

    def _new_head(self) -> asyncio.Future[None]:
        head: asyncio.Future[None] = self._loop.create_future()
        # an exchange given up early never awaits it
        head.add_done_callback(_retrieved)
        return head

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    # --- asyncio ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or UpstreamGone("the control plane closed the connection")
        self.reusable = False
        if not self._head.done():
            self._head.set_exception(UpstreamGone("no answer before the connection closed"))
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def pause_writing(self) -> None:
        # `drained` reads the buffer's size
        pass

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._head.done() and self._ended:
            # bytes nobody asked for: not to be trusted again
            self.reusable = False
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamGone(f"invalid answer from the control plane: {exc}"))
            return
        if not self._head.done():
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._fail(UpstreamGone("the control plane's answer head is too large"))

    # --- parser callbacks ---------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:
            # an interim answer: the final one follows
            self.headers = []
            return
        self.status = status
        self._head_bytes = 0
        if not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self.status:
            # the end of an interim answer
            return
        self._ended = True
        self.reusable = self._parser.should_keep_alive()
        self._wake()

    def _fail(self, error: UpstreamGone) -> None:
        if not self._head.done():
            self._head.set_exception(error)
        self._lost = error
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class PeerSlots:
    """At most ``share`` slots held at once by each client address; an address's count is
    kept only while it holds or waits for one."""

    def __init__(self, share: int) -> None:
        self.share = share
        self._shares: dict[str, asyncio.Semaphore] = {}
        self._users: Counter[str] = Counter()

    async def acquire(self, peer: str) -> None:
        share = self._shares.get(peer)
        if share is None:
            share = self._shares[peer] = asyncio.Semaphore(self.share)
        self._users[peer] += 1
        try:
            await share.acquire()
        except BaseException:
            self._forget(peer)
            raise

    def release(self, peer: str) -> None:
        self._shares[peer].release()
        self._forget(peer)

    def __len__(self) -> int:
        return len(self._shares)

    def _forget(self, peer: str) -> None:
        self._users[peer] -= 1
        if not self._users[peer]:
            del self._users[peer]
            del self._shares[peer]


class ProxyPool:
    def __init__(
        self, path: str, size: int, idle_s: float, connect_timeout_s: float, max_head_bytes: int
    ) -> None:
        self.path = path
        self._idle: list[tuple[ProxyConnection, float]] = []
        self._slots = asyncio.Semaphore(size)
        self.peers = PeerSlots(max(1, size // 2))
        self._idle_s = idle_s
        self._connect_timeout_s = connect_timeout_s
        self._max_head_bytes = max_head_bytes

    async def take(self, peer: str) -> ProxyConnection:
        """A connection for one exchange for the client at ``peer`` (`TimeoutError` or
        `OSError` if none can be had); give it back with `give`."""
        async with asyncio.timeout(self._connect_timeout_s):
            await self.peers.acquire(peer)
            try:
                await self._slots.acquire()
            except BaseException:
                self.peers.release(peer)
                raise
        loop = asyncio.get_running_loop()
        try:
            while self._idle:
                conn, since = self._idle.pop()
                if loop.time() - since < self._idle_s and conn.open:
                    conn.begin()
                    return conn
                conn.close()
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_unix_connection(
                    lambda: ProxyConnection(self._max_head_bytes), self.path
                )
            conn.begin()
            conn.used = False
            return conn
        except BaseException:
            self._release(peer)
            raise

    def give(self, conn: ProxyConnection, peer: str, reuse: bool) -> None:
        """Back from ``peer``'s exchange: kept for the next one if ``reuse`` and it may be."""
        self._release(peer)
        if reuse and conn.reusable:
            self._idle.append((conn, asyncio.get_running_loop().time()))
        else:
            conn.close()

    def _release(self, peer: str) -> None:
        self._slots.release()
        self.peers.release(peer)

    def close(self) -> None:
        for conn, _ in self._idle:
            conn.close()
        self._idle.clear()

"""One request as its handler sees it: the head, parsed once, and the body as it arrives.

The head's fields are plain attributes (no scope, no message dicts): the method, the raw path
and query, the headers as the parser read them (names lower-cased, values as sent), the HTTP
version, whether the connection may be kept alive, and the peer's address. Besides the list, a
few wanted headers (the ones the server was told its handlers read) are decoded once into
``wanted``, so a handler looks them up instead of walking the list.

`Request.read` hands the body over in the chunks the parser produced, never joined: each call
gives the next chunk and whether more follow. A client that asked for ``100-continue`` gets it
on the first read, and only then (a handler that answers without reading never invites the
body). Reading is paused while more than `HIGH_WATER_BYTES` wait unread, so a client that sends
faster than its handler reads holds at most that much, plus one socket read. ``received`` and
``buffered`` say what the body has brought so far and what of it waits unread: what the request
really holds, whatever it declared. If the server stops the body (408, 413, a broken frame),
``read`` raises the `GatewayError` it answered with; the handler's own answer is then dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import unquote

from gateway.errors import GatewayError

HIGH_WATER_BYTES = 256 * 1024  # one socket read's worth (uvloop's read size)
NO_PARAMS: Mapping[str, str] = {}


class BodyFlow(Protocol):
    """What a request's body needs from its connection (`gateway.worker.http.protocol`)."""

    def body_taken(self) -> None:
        """The handler took chunks: reading may resume."""

    def continue_body(self) -> None:
        """The handler waits for a body the client holds back for ``100-continue``."""


class Answering(Protocol):
    """What the connection reads of a request's answer (`gateway.worker.http.answer.Answer`)."""

    dropped: bool

    @property
    def started(self) -> bool: ...

    @property
    def complete(self) -> bool: ...

    def settle(self, flushed: bool) -> None: ...


class Request:
    __slots__ = (
        "__weakref__",
        "_chunks",
        "_error",
        "_expects",
        "_flow",
        "_over",
        "_waiter",
        "answer",
        "body_ended",
        "buffered",
        "headers",
        "http_version",
        "keep_alive",
        "method",
        "params",
        "peer",
        "query",
        "raw_path",
        "received",
        "wanted",
    )

    def __init__(
        self,
        flow: BodyFlow,
        method: str,
        raw_path: bytes,
        query: bytes,
        headers: list[tuple[bytes, bytes]],
        wanted: dict[str, str],
        http_version: str,
        keep_alive: bool,
        peer: str,
        expects_continue: bool,
    ) -> None:
        self._flow = flow
        self.method = method
        self.raw_path = raw_path
        self.query = query
        self.headers = headers
        self.wanted = wanted
        self.http_version = http_version
        self.keep_alive = keep_alive
        self.peer = peer
        self.params = NO_PARAMS  # the router's path parameters, when a route has some
        self.answer: Answering | None = None  # set when its handler starts
        self.received = 0  # body bytes arrived so far
        self.buffered = 0  # of those, not yet read by the handler
        self._chunks: list[bytes] = []
        self.body_ended = False  # the parser saw the body's end (it may still wait unread)
        self._over = False  # over the high-water mark: the connection paused reading
        self._error: GatewayError | None = None
        self._expects = expects_continue
        self._waiter: asyncio.Future[None] | None = None

    @property
    def path(self) -> str:
        """The path, percent-decoded (as ASGI's ``path``)."""
        raw = self.raw_path
        return unquote(raw.decode("latin-1")) if b"%" in raw else raw.decode("latin-1")

    def header(self, name: bytes) -> bytes | None:
        """The last value of header ``name`` (lower-case), walking the list: for names not
        among the wanted ones."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found

    async def read(self) -> tuple[bytes, bool]:
        """The body's next chunk and whether more follow; ``(b"", False)`` once it is all read.

        Raises the `GatewayError` the server answered with when it stopped the body."""
        chunks = self._chunks
        while not chunks:
            if self._error is not None:
                raise self._error
            if self.body_ended:
                return b"", False
            if self._expects:
                self._expects = False
                self._flow.continue_body()
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        chunk = chunks.pop(0)
        self.buffered -= len(chunk)
        if self._over and self.buffered <= HIGH_WATER_BYTES:
            self._over = False
            self._flow.body_taken()
        return chunk, bool(chunks) or not self.body_ended

    # --- the connection's side --------------------------------------------------------

    def arrived(self, chunk: bytes) -> bool:
        """A chunk of the body was parsed; True while its unread bytes are over the mark."""
        self._expects = False  # the client sends without waiting
        self._chunks.append(chunk)
        self.received += len(chunk)
        self.buffered += len(chunk)
        if self._waiter is not None:
            self._wake()
        if self.buffered > HIGH_WATER_BYTES:
            self._over = True
        return self._over

    def end_body(self) -> None:
        self.body_ended = True
        self._expects = False
        if self._waiter is not None:
            self._wake()

    def stop(self, error: GatewayError) -> None:
        """The server stopped the body with ``error`` (already answered): reads raise it."""
        self._error = error
        self._chunks.clear()
        self.buffered = 0
        self._over = False
        self._wake()

    def drop_body(self) -> None:
        """Its answer is complete: what of the body is left is read and dropped."""
        self._chunks.clear()
        self.buffered = 0
        self._over = False

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

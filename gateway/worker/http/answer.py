"""One request's answer: written whole in one write, and known once the socket has taken it.

`Answer.send` writes the status line, ``date``, the header lines the handler built (``name:
value`` and CRLF each, nothing re-checked: only values the handler made or checked go there),
``content-length`` and, when the connection ends after it, ``connection: close``; the head and
a small body leave in one ``write``, a large body (or a list of pieces) in one ``writelines``
after its head, never copied. `Answer.start`, `Answer.write` and `Answer.end` stream a body
(``content-length`` when known, else chunked, or up to the close for an HTTP/1.0 client), with
``write`` waiting while the transport holds more than `STREAM_HIGH_WATER_BYTES`.

Written is not sent: a client that does not read leaves the answer in the transport's buffer.
The connection keeps the transport's write-buffer limits at zero, so the transport says when it
holds anything unsent and when that is gone; ``flushed`` is None until then, True once every
byte of the answer was handed to the socket, False when it never will be (the connection was
lost, or the server answered for the handler). `Answer.when_flushed` and `Answer.wait_flushed`
tell a handler that holds memory for the answer (the byte budget) when it may give it back.

Once the server has answered for the request itself (408, 413) or the connection is lost, the
handler's answer is dropped quietly.
"""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import Callable, Sequence
from email.utils import formatdate
from typing import TYPE_CHECKING, Protocol

import orjson

if TYPE_CHECKING:
    from gateway.worker.http.request import Request

log = logging.getLogger(__name__)

Buffer = bytes | bytearray | memoryview
JOIN_BELOW = 16 * 1024  # a smaller body is copied after its head: cheaper than an iovec
STREAM_HIGH_WATER_BYTES = 256 * 1024  # a streamed body waits while this much is unsent
JSON_LINE = b"content-type: application/json\r\n"
_CLOSE = b"connection: close\r\n"
_KEEP = b"connection: keep-alive\r\n"  # an HTTP/1.0 client closes unless told otherwise
_CHUNKED = b"transfer-encoding: chunked\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_NO_BODY = frozenset((204, 304))  # and every 1xx: no content-length, no body


def _status_lines() -> dict[int, bytes]:
    return {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in http.HTTPStatus}


STATUS_LINE = _status_lines()


class Date:
    """The ``date`` header line, refreshed once a second by the server (`refresh`)."""

    line = b""

    @classmethod
    def refresh(cls) -> None:
        cls.line = b"date: %s\r\n" % formatdate(usegmt=True).encode()


Date.refresh()


def error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


class Connection(Protocol):
    """What an answer needs from its connection (`gateway.worker.http.protocol`)."""

    transport: asyncio.Transport
    closing: bool  # every answer from now on closes the connection (drain, an error)

    def written(self, answer: Answer, close: bool) -> None:
        """The answer's last bytes were handed to the transport."""

    async def drained(self) -> None:
        """Returns once the transport holds nothing unsent (or the connection is lost)."""


class Answer:
    __slots__ = (
        "__weakref__",
        "_chunked",
        "_close",
        "_conn",
        "_head_only",
        "_keep_alive",
        "_version",
        "_waiters",
        "complete",
        "dropped",
        "flushed",
        "started",
    )

    def __init__(self, conn: Connection, request: Request) -> None:
        self._conn = conn
        # what it needs of the request, copied: an answer does not keep its request alive
        self._head_only = request.method == "HEAD"
        self._version = request.http_version
        self._keep_alive = request.keep_alive
        self._chunked = False
        self._close = False
        self._waiters: list[Callable[[bool], object]] | None = None
        self.started = False  # its head was written (or dropped): the server cannot answer
        self.complete = False
        self.dropped = False  # set by the connection: nothing of it will be written
        self.flushed: bool | None = None

    def send(self, status: int, lines: bytes = b"", body: Buffer = b"") -> None:
        """The whole answer, in one write (``lines``: header lines, CRLF each)."""
        if self.started:
            raise RuntimeError("this request was answered already")
        self.started = True
        if self.dropped:
            self._dropped()
            return
        conn = self._conn
        close = self._close = conn.closing or not self._keep_alive
        connection = _CLOSE if close else _KEEP if self._version == "1.0" else b""
        line = STATUS_LINE.get(status) or _status(status)
        transport = conn.transport
        if status in _NO_BODY or status < 200:
            transport.write(b"%s%s%s%s\r\n" % (line, Date.line, lines, connection))
        else:
            head = b"%s%s%scontent-length: %d\r\n%s\r\n" % (
                line,
                Date.line,
                lines,
                len(body),
                connection,
            )
            if self._head_only:
                transport.write(head)
            elif len(body) < JOIN_BELOW:
                transport.write(head + body)
            else:  # one vectored write (writev on uvloop): the body is not copied
                transport.writelines((head, body))
        self.complete = True
        conn.written(self, close)

    def send_pieces(self, status: int, lines: bytes, pieces: Sequence[Buffer]) -> None:
        """The whole answer, its body in ``pieces`` after the head in one vectored write,
        none copied."""
        if self.started:
            raise RuntimeError("this request was answered already")
        self.started = True
        if self.dropped:
            self._dropped()
            return
        head = self._head(status, lines, sum(len(piece) for piece in pieces))
        if self._head_only or not _has_body(status):
            self._conn.transport.write(head)
        else:
            self._conn.transport.writelines((head, *pieces))
        self.complete = True
        self._conn.written(self, self._close)

    def send_error(self, status: int, message: str, lines: bytes = b"") -> None:
        """``{"error": message}`` with ``status``."""
        self.send(status, JSON_LINE + lines, error_body(message))

    def start(self, status: int, lines: bytes = b"", length: int | None = None) -> None:
        """A streamed answer's head: ``length`` bytes follow, or an unknown number (None)."""
        if self.started:
            raise RuntimeError("this request was answered already")
        self.started = True
        if self.dropped:
            return
        if length is None and _has_body(status) and not self._head_only:
            if self._version == "1.0":
                self._close = True  # the body ends with the connection
            else:
                self._chunked = True
        self._conn.transport.write(self._head(status, lines, length))

    async def write(self, chunk: Buffer) -> None:
        """A streamed answer's next bytes; waits while the transport holds too much."""
        if self.dropped or not chunk or self._head_only:
            return
        transport = self._conn.transport
        if self._chunked:
            transport.writelines((b"%x\r\n" % len(chunk), chunk, b"\r\n"))
        else:
            transport.write(chunk)
        if transport.get_write_buffer_size() > STREAM_HIGH_WATER_BYTES:
            await self._conn.drained()

    def end(self) -> None:
        """A streamed answer is complete."""
        if not self.started or self.complete:
            raise RuntimeError("end() without start(), or twice")
        if self.dropped:
            self._dropped()
            return
        if self._chunked:
            self._conn.transport.write(_LAST_CHUNK)
        self.complete = True
        self._conn.written(self, self._close)

    def abort(self) -> None:
        """A streamed answer cannot be completed: the connection is cut, so the client sees an
        incomplete answer rather than a short one that looks whole."""
        self.started = self.complete = True
        if not self.dropped:
            self.dropped = True
            self._conn.transport.abort()
        self.settle(False)

    # --- flushed ------------------------------------------------------------------------

    def when_flushed(self, callback: Callable[[bool], object]) -> None:
        """Calls ``callback(True)`` once the answer's bytes are all handed to the socket, or
        ``callback(False)`` if they never will be; at once if that is known already."""
        if self.flushed is not None:
            callback(self.flushed)
        elif self._waiters is None:
            self._waiters = [callback]
        else:
            self._waiters.append(callback)

    async def wait_flushed(self) -> bool:
        """True once the answer's bytes are all handed to the socket, False if they never
        will be."""
        if self.flushed is not None:
            return self.flushed
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def settled(flushed: bool) -> None:
            if not future.done():
                future.set_result(flushed)

        self.when_flushed(settled)
        return await future

    def settle(self, flushed: bool) -> None:
        """The connection's word: the answer left (True) or never will (False)."""
        if self.flushed is not None:
            return
        self.flushed = flushed
        waiters = self._waiters
        if waiters is not None:
            self._waiters = None
            for callback in waiters:
                try:
                    callback(flushed)
                except Exception:  # the connection's state must not depend on a handler's bug
                    log.exception("an answer's flushed callback failed")

    def _head(self, status: int, lines: bytes, length: int | None) -> bytes:
        """A head with ``length`` (None: chunked, or up to the close) for a body."""
        close = self._close = self._close or self._conn.closing or not self._keep_alive
        if not _has_body(status):
            framing = b""
        elif length is not None:
            framing = b"content-length: %d\r\n" % length
        else:
            framing = _CHUNKED if self._chunked else b""
        connection = _connection(close, self._version)
        return b"%s%s%s%s%s\r\n" % (_status(status), Date.line, lines, framing, connection)

    def _dropped(self) -> None:
        self.complete = True
        self.settle(False)


def _connection(close: bool, http_version: str) -> bytes:
    if close:
        return _CLOSE
    return _KEEP if http_version == "1.0" else b""


def _has_body(status: int) -> bool:
    return status >= 200 and status != 204 and status != 304


def _status(status: int) -> bytes:
    line = STATUS_LINE.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status

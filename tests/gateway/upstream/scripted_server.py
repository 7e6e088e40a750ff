"""A raw HTTP/1.1 server whose misbehaviour the transport tests choose by request path.

Real HTTP servers are too well behaved to test a client's edge cases (stale keep-alive
connections, garbage, truncated replies), so this one writes its replies byte by byte and counts
what the clients did: connections accepted, open and closed, requests read.
"""

from __future__ import annotations

import asyncio
import fcntl
import struct
import termios
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

CHUNKS = (b"first,", b"second,", b"third")
HUGE = 64 * 1024 * 1024  # what /huge-* would send if the client read it all
STALE = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"  # a reply nobody asked for


async def wait_until(condition: Callable[[], bool], within_s: float = 5.0) -> None:
    """Poll ``condition`` until it holds; fail with TimeoutError after ``within_s`` seconds."""
    async with asyncio.timeout(within_s):
        while not condition():  # noqa: ASYNC110 - the condition is another party's state
            await asyncio.sleep(0.001)


class ScriptedServer:
    """Loopback server; each path is a behaviour (see `_ROUTES`)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.requests = 0
        self.last_headers: dict[str, str] = {}
        self.body_bytes_sent = 0  # by /huge-*, before the client stopped reading
        self.release = asyncio.Event()  # lets /late reply
        self.port = 0
        self._newest: asyncio.StreamWriter | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def open_connections(self) -> int:
        return len(self._writers)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def send_now(self, data: bytes, within_s: float = 5.0) -> None:
        """Write ``data`` on the newest connection; return once the client's kernel holds it.

        Synchronous on purpose: the client's loop cannot run in between, so the bytes sit in its
        socket unread, as a late reply does when the pool hands the connection out again. On
        loopback the client's kernel acknowledges what it has queued, so "all acknowledged" is
        the condition waited on (the loop blocks for microseconds).
        """
        assert self._newest is not None, "no connection yet"
        self._newest.write(data)
        transport = self._newest.transport
        assert transport.get_write_buffer_size() == 0, "not sent at once"
        fd = transport.get_extra_info("socket").fileno()
        deadline = time.monotonic() + within_s
        while struct.unpack("i", fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * 4))[0]:
            if time.monotonic() > deadline:
                raise TimeoutError("the client's kernel did not acknowledge the bytes")
            time.sleep(0.0001)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self._newest = writer
        self.accepted += 1
        served = 0
        owed: list[bytes] = []  # replies this connection still owes, sent before the next one
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                _, path, _ = request_line.split(" ")
                headers = dict(line.split(": ", 1) for line in lines if line)
                headers = {k.lower(): v for k, v in headers.items()}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests += 1
                self.last_headers = headers
                if owed:  # a late answer goes out ahead of this request's, whatever its path
                    writer.write(owed.pop())
                # routed by the first segment: a replica URL's path prefix names its behaviour
                behaviour = _ROUTES["/" + path.split("?")[0].split("/")[1]]
                method = request_line.split(" ")[0]
                exchange = Exchange(reader, writer, headers, body, served, self, method, owed)
                if not await behaviour(exchange):
                    break
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()
            self._tasks.discard(task)


@dataclass(frozen=True)
class Exchange:
    """One request as the server read it; ``served`` counts earlier replies on its connection,
    ``owed`` holds what the connection will send ahead of the next request's reply."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    headers: dict[str, str]
    body: bytes
    served: int
    server: ScriptedServer
    method: str = "POST"
    owed: list[bytes] = field(default_factory=list)


Behaviour = Callable[[Exchange], Awaitable[bool]]


def _head(status: str, *extra: str) -> bytes:
    lines = [
        f"HTTP/1.1 {status}",
        "Content-Type: application/octet-stream",
        "X-Mixed-Case: Yes",
        "X-Twice: a",
        "x-twice: b",
    ]
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode("latin-1")


async def _echo(ex: Exchange) -> bool:
    """200 with Content-Length, the request body echoed; keep-alive."""
    echo = ex.headers.get("x-echo", "")
    ex.writer.write(_head("200 OK", f"Content-Length: {len(ex.body)}", f"X-Echo: {echo}") + ex.body)
    return True


async def _chunked(ex: Exchange) -> bool:
    """200 in chunked encoding (three chunks, two writes); keep-alive."""
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in CHUNKS)
    ex.writer.write(_head("200 OK", "Transfer-Encoding: chunked") + chunks[:7])
    await ex.writer.drain()
    ex.writer.write(chunks[7:] + b"0\r\n\r\n")
    return True


async def _close(ex: Exchange) -> bool:
    """200 with ``Connection: close``, then close."""
    ex.writer.write(_head("200 OK", "Content-Length: 2", "Connection: close") + b"ok")
    await ex.writer.drain()
    return False


async def _close_after(ex: Exchange) -> bool:
    """200 promising keep-alive, then close: the connection goes stale in the client's pool."""
    ex.writer.write(_head("200 OK", "Content-Length: 2") + b"ok")
    await ex.writer.drain()
    return False


async def _trailing_junk(ex: Exchange) -> bool:
    """A complete reply followed by junk in the same write: the connection must not be reused."""
    ex.writer.write(_head("200 OK", "Content-Length: 2") + b"okJUNK\r\n")
    return True


async def _drop_if_reused(ex: Exchange) -> bool:
    """As /echo on a fresh connection; on a reused one, close without replying (the race of a
    server closing an idle connection just as the client sends on it)."""
    if ex.served:
        return False
    return await _echo(ex)


async def _drop(ex: Exchange) -> bool:
    """Close without replying."""
    return False


async def _hang(ex: Exchange) -> bool:
    """Never reply; hold the connection until the client closes it."""
    while await ex.reader.read(65536):
        pass
    return False


async def _garbage(ex: Exchange) -> bool:
    """Reply with bytes that are not HTTP, and keep the connection open."""
    ex.writer.write(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    return await _hang(ex)


async def _truncated(ex: Exchange) -> bool:
    """Promise 100 bytes, send 10, close."""
    ex.writer.write(_head("200 OK", "Content-Length: 100") + b"0123456789")
    await ex.writer.drain()
    return False


async def _until_eof(ex: Exchange, status: str = "200 OK") -> bool:
    """200 with neither Content-Length nor chunked: the body ends when the server closes."""
    ex.writer.write(_head(status) + b"until-")
    await ex.writer.drain()
    ex.writer.write(b"eof")
    await ex.writer.drain()
    return False


async def _until_eof_404(ex: Exchange) -> bool:
    """As /until-eof with status 404."""
    return await _until_eof(ex, "404 Not Found")


# --- replicas that break HTTP/1.1 framing ------------------------------------------------------


async def _interim_then_echo(ex: Exchange, interim: bytes) -> bool:
    ex.writer.write(interim)
    await ex.writer.drain()
    return await _echo(ex)


async def _continue(ex: Exchange) -> bool:
    """100 Continue (unasked), then the echo."""
    return await _interim_then_echo(ex, b"HTTP/1.1 100 Continue\r\n\r\n")


async def _early_hints(ex: Exchange) -> bool:
    """103 Early Hints, then the echo."""
    return await _interim_then_echo(ex, b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")


async def _extra_reply(ex: Exchange) -> bool:
    """The echo, then a second reply nobody asked for."""
    await _echo(ex)
    await ex.writer.drain()
    ex.writer.write(STALE)
    return True


async def _stale_first(ex: Exchange) -> bool:
    """On a reused connection, first a late copy of an earlier reply, then the echo; keeps the
    connection open even when asked to close it (as an out-of-step server would)."""
    if ex.served:
        ex.writer.write(STALE)
    return await _echo(ex)


async def _late_copy(ex: Exchange) -> bool:
    """A replica whose stream falls out of step (as ``late-stale`` in tests/support/rogue_replica):
    the first POST on a connection gets its echo at once, and a copy of it later, ahead of the
    next reply on the connection; from then on each POST's echo waits for the next request on
    the connection (one behind), whatever that request is. A GET is the model's readiness,
    which says 503 (not ready): only a late answer read in its place makes it pass."""
    if ex.method == "GET":
        ex.writer.write(_head("503 Service Unavailable", "Content-Length: 9") + b"not ready")
        return True
    echo = _head("200 OK", f"Content-Length: {len(ex.body)}") + ex.body
    if not ex.served:
        ex.writer.write(echo)
    ex.owed.append(echo)
    return True


async def _late(ex: Exchange) -> bool:
    """Reply only once the test sets ``server.release`` (after the client gave up)."""
    await ex.server.release.wait()
    ex.writer.write(_head("200 OK", "Content-Length: 4") + b"late")
    return True


async def _many_headers(ex: Exchange) -> bool:
    """The echo with 10,000 copies of one header."""
    repeats = ["X-Repeat: v"] * 10_000
    ex.writer.write(_head("200 OK", *repeats, f"Content-Length: {len(ex.body)}") + ex.body)
    return True


async def _stream(ex: Exchange, head: bytes, piece: bytes, size: int) -> bool:
    """Write ``head``, then ``piece`` over and over (``size`` body bytes), as fast as read."""
    ex.writer.write(head)
    while ex.server.body_bytes_sent < HUGE:
        ex.writer.write(piece)
        ex.server.body_bytes_sent += size
        await ex.writer.drain()
    return False


async def _huge_chunked(ex: Exchange) -> bool:
    """A chunked 200 of HUGE bytes."""
    data = b"x" * 65536
    piece = b"%x\r\n%s\r\n" % (len(data), data)
    return await _stream(ex, _head("200 OK", "Transfer-Encoding: chunked"), piece, len(data))


async def _huge_length(ex: Exchange) -> bool:
    """A 200 that says Content-Length: HUGE."""
    data = b"x" * 65536
    return await _stream(ex, _head("200 OK", f"Content-Length: {HUGE}"), data, len(data))


async def _no_content(ex: Exchange) -> bool:
    """204 with no body and no Content-Length; keep-alive."""
    ex.writer.write(_head("204 No Content"))
    return True


async def _head_reply(ex: Exchange) -> bool:
    """The head of a 5-byte reply, no body: the right answer to HEAD; keep-alive."""
    ex.writer.write(_head("200 OK", "Content-Length: 5"))
    return True


async def _truncated_chunked(ex: Exchange) -> bool:
    """A chunked 200 cut short after its first chunk."""
    ex.writer.write(_head("200 OK", "Transfer-Encoding: chunked") + b"5\r\nfirst\r\n")
    await ex.writer.drain()
    return False


_ROUTES: dict[str, Behaviour] = {
    "/echo": _echo,
    "/chunked": _chunked,
    "/close": _close,
    "/close-after": _close_after,
    "/trailing-junk": _trailing_junk,
    "/drop-if-reused": _drop_if_reused,
    "/drop": _drop,
    "/hang": _hang,
    "/garbage": _garbage,
    "/truncated": _truncated,
    "/until-eof": _until_eof,
    "/until-eof-404": _until_eof_404,
    "/continue": _continue,
    "/early-hints": _early_hints,
    "/extra-reply": _extra_reply,
    "/late": _late,
    "/late-copy": _late_copy,
    "/stale-first": _stale_first,
    "/many-headers": _many_headers,
    "/huge-chunked": _huge_chunked,
    "/huge-length": _huge_length,
    "/no-content": _no_content,
    "/head": _head_reply,
    "/truncated-chunked": _truncated_chunked,
}

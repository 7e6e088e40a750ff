"""A raw HTTP/1.1 server whose misbehaviour the transport tests choose by request path.

Real HTTP servers are too well behaved to test a client's edge cases (stale keep-alive
connections, garbage, truncated replies), so this one writes its replies byte by byte and counts
what the clients did: connections accepted, open and closed, requests read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

CHUNKS = (b"first,", b"second,", b"third")


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
        self.port = 0
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
        self.accepted += 1
        served = 0
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
                behaviour = _ROUTES[path.split("?")[0]]
                if not await behaviour(Exchange(reader, writer, headers, body, served)):
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
    """One request as the server read it; ``served`` counts earlier replies on its connection."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    headers: dict[str, str]
    body: bytes
    served: int


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


async def _until_eof(ex: Exchange) -> bool:
    """200 with neither Content-Length nor chunked: the body ends when the server closes."""
    ex.writer.write(_head("200 OK") + b"until-")
    await ex.writer.drain()
    ex.writer.write(b"eof")
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
}

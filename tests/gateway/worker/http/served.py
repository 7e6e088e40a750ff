"""A lean server on a free port of 127.0.0.1 in the test's loop, raw-socket clients, bounded waits.

`App`'s handlers: ``/`` reads the body and answers its length (a body the server stops is
recorded with the error ``read`` raised); ``/early`` answers 413 without reading; ``/digest``
answers the body's sha256 and how many chunks it came in; ``/listen`` reads the body, then
waits until cancelled (a client that leaves); ``/slow`` waits on ``App.release``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.worker.http.answer import JSON_LINE, Answer
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.request import Request
from gateway.worker.http.router import Router
from gateway.worker.http.server import HttpServer

WAIT_S = 10.0  # the bound on every wait: generous, a busy machine must not fail these
# what a test opened, closed after it whether it passed or not (`conftest.cleaned_up`): a
# loop closed with sockets still open fails, and hangs the run
OPENED: list[asyncio.StreamWriter] = []
STARTED: list[HttpServer] = []


@dataclass
class App:
    seen: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    answers: list[Answer] = field(default_factory=list)

    def router(self) -> Router:
        router = Router(self.size)
        router.add("POST", "/early", self.early)
        router.add("POST", "/digest", self.digest)
        router.add("POST", "/listen", self.listen)
        router.add("GET", "/slow", self.slow)
        router.add("GET", "/big/{size}", self.big)
        return router

    async def size(self, request: Request, answer: Answer) -> None:
        self.requests.append(request)
        self.answers.append(answer)
        size = 0
        try:
            more = True
            while more:
                chunk, more = await request.read()
                size += len(chunk)
        except GatewayError as error:
            self.seen.append({"error": error.status, "message": error.message})
            answer.send(400, JSON_LINE, b'{"error":"dropped"}')  # must not reach the client
            return
        self.seen.append({"size": size, "method": request.method})
        send_json(answer, 200, {"size": size})

    async def early(self, request: Request, answer: Answer) -> None:
        send_json(answer, 413, {"error": "too large"})

    async def digest(self, request: Request, answer: Answer) -> None:
        digest, chunks, more = hashlib.sha256(), 0, True
        while more:
            chunk, more = await request.read()
            assert isinstance(chunk, bytes)
            digest.update(chunk)
            chunks += 1
        send_json(answer, 200, {"sha256": digest.hexdigest(), "chunks": chunks})

    async def listen(self, request: Request, answer: Answer) -> None:
        more = True
        while more:
            _, more = await request.read()
        self.seen.append({"listening": True})
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.seen.append({"cancelled": True})
            raise

    async def slow(self, request: Request, answer: Answer) -> None:
        self.seen.append({"slow": "started"})
        await self.release.wait()
        send_json(answer, 200, {"slow": True})

    async def big(self, request: Request, answer: Answer) -> None:
        self.answers.append(answer)
        answer.send(
            200, b"content-type: application/octet-stream\r\n", bytes(int(request.params["size"]))
        )


def send_json(answer: Answer, status: int, doc: Any) -> None:
    answer.send(status, JSON_LINE, orjson.dumps(doc))


async def serve(limits: ClientLimits, router: Router, wanted: tuple[str, ...] = ()) -> HttpServer:
    server = HttpServer(router, limits, wanted_headers=wanted)
    await server.start(host="127.0.0.1", port=0)
    STARTED.append(server)
    return server


async def until(predicate: Callable[[], object]) -> None:
    """Polls ``predicate`` every 10 ms; `TimeoutError` after `WAIT_S`."""
    for _ in range(int(WAIT_S / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("condition not met in time")


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    OPENED.append(writer)
    return reader, writer


async def clean_up() -> None:
    """Cuts every client connection a test opened and drains every server it started."""
    for writer in OPENED:
        writer.transport.abort()
    OPENED.clear()
    for server in STARTED:
        await asyncio.wait_for(server.drain(0.5), WAIT_S)
    STARTED.clear()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers, body (read by content-length), within the bound."""
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(lines[0].split()[1]), headers, body


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection within the bound (reset counts as closed)."""
    try:
        async with asyncio.timeout(WAIT_S):
            return await reader.read(65536) == b""
    except ConnectionResetError:
        return True


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n%s\r\n"
        % (path.encode(), len(body), extra)
        + body
    )


async def within(awaitable: Awaitable[Any]) -> Any:
    async with asyncio.timeout(WAIT_S):
        return await awaitable

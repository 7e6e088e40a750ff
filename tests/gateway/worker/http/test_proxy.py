"""The forwarding handler against a real uvicorn serving a small Starlette app on a Unix socket.

The lean server answers ``/v2/health/live`` itself and forwards everything else, as a worker
forwards the control plane's paths to the control process.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.worker.http.answer import Answer
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.proxy import UnixProxy
from gateway.worker.http.proxy_pool import PeerSlots
from gateway.worker.http.request import Request
from gateway.worker.http.router import PathRouter
from gateway.worker.http.server import HttpServer
from tests.gateway.worker.http.served import (
    WAIT_S,
    answer,
    closed,
    connect,
    serve,
    until,
    within,
)
from tests.support.clock import FakeClock

MIB = 1024 * 1024
STREAMED = bytes(range(256)) * 32 * 1024  # 8 MiB


async def metrics(request: StarletteRequest) -> Response:
    return PlainTextResponse("gateway_requests_total 1\n")


async def stream(request: StarletteRequest) -> Response:
    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(STREAMED), 64 * 1024):
            yield STREAMED[at : at + 64 * 1024]

    return StreamingResponse(pieces(), media_type="application/octet-stream")


async def echo(request: StarletteRequest) -> Response:
    body = await request.body()
    doc = {
        "sha256": hashlib.sha256(body).hexdigest(),
        "size": len(body),
        "headers": sorted(k for k in request.headers if k not in ("content-length",)),
        "peer": request.headers.get("x-gateway-peer"),
        "host": request.headers.get("host"),
        "query": request.url.query,
    }
    headers = {"connection": "x-private", "x-private": "1", "keep-alive": "timeout=5"}
    return JSONResponse(doc, headers=headers)


async def dies(request: StarletteRequest) -> Response:
    async def pieces() -> AsyncIterator[bytes]:
        yield b"x" * 100_000
        raise RuntimeError("the control process died mid-answer")

    return StreamingResponse(pieces())


APP = Starlette(
    routes=[
        Route("/metrics", metrics),
        Route("/stream", stream),
        Route("/echo", echo, methods=["POST"]),
        Route("/dies", dies),
    ]
)


async def live(request: Request, answer_: Answer) -> None:
    answer_.send(200, b"", b"live")


@dataclass
class Site:
    server: HttpServer
    proxy: UnixProxy
    control: uvicorn.Server


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    path = str(tmp_path / "control.sock")
    config = uvicorn.Config(
        APP, uds=path, lifespan="off", log_level="critical", timeout_keep_alive=1
    )
    control = uvicorn.Server(config)
    serving = asyncio.create_task(control.serve())
    await until(lambda: control.started)
    proxy = UnixProxy(path, idle_s=30.0, answer_timeout_s=5.0)
    router = PathRouter(proxy)
    router.add("GET", "/v2/health/live", live)
    server = await serve(ClientLimits(min_body_rate=0), router)
    yield Site(server, proxy, control)
    await within(server.drain(1.0))
    proxy.pool.close()
    control.should_exit = True
    await within(serving)


def get(path: str, extra: bytes = b"") -> bytes:
    return b"GET %s HTTP/1.1\r\nhost: gw.example\r\n%s\r\n" % (path.encode(), extra)


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    async with asyncio.timeout(WAIT_S):
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
            body += (await reader.readexactly(size + 2))[:-2]
            if size == 0:
                return body


async def test_own_paths_are_served_and_the_rest_forwarded(site: Site) -> None:
    reader, writer = await connect(site.server.port)
    writer.write(get("/v2/health/live") + get("/metrics") + get("/nope"))
    assert (await answer(reader))[::2] == (200, b"live")
    status, headers, body = await answer(reader)
    assert (status, body) == (200, b"gateway_requests_total 1\n")
    assert headers["content-type"].startswith("text/plain")
    assert list(headers).count("date") == 1  # ours; the control plane's is not passed on
    assert (await answer(reader))[0] == 404
    assert len(site.proxy.pool._idle) == 1  # one kept-alive connection carried both


async def test_a_large_streamed_answer_arrives_whole_held_a_bounded_amount(site: Site) -> None:
    reader, writer = await connect(site.server.port)
    writer.write(get("/stream"))
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    assert b"transfer-encoding: chunked\r\n" in head
    # not read for a while: the worker holds what its transport and the pool buffer, no more
    await until(lambda: site.server.held() > 0)
    await asyncio.sleep(0.3)
    assert site.server.held() <= 2 * MIB
    body = await read_chunked(reader)
    assert hashlib.sha256(body).digest() == hashlib.sha256(STREAMED).digest()


@pytest.mark.parametrize("framing", ["length", "chunked"])
async def test_a_post_body_is_forwarded_with_the_peer_and_without_hop_by_hop_fields(
    site: Site, framing: str
) -> None:
    body = bytes(range(256)) * 12 * 1024  # 3 MiB
    extra = (
        b"connection: x-hop\r\nx-hop: 1\r\nkeep-alive: 5\r\nte: trailers\r\n"
        b"x-gateway-peer: 10.0.0.66\r\nx-gateway-hold-s: 30\r\nx-kept: yes\r\n"
    )
    if framing == "length":
        extra += b"content-length: %d\r\n" % len(body)
        payload = body
    else:
        extra += b"transfer-encoding: chunked\r\n"
        payload = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (7, body[:7], len(body) - 7, body[7:])
    reader, writer = await connect(site.server.port)
    writer.write(b"POST /echo?a=1 HTTP/1.1\r\nhost: gw.example\r\n%s\r\n" % extra + payload)
    status, headers, got = await answer(reader)
    doc = orjson.loads(got)
    assert status == 200 and doc["sha256"] == hashlib.sha256(body).hexdigest()
    assert doc["peer"] == "127.0.0.1" and doc["host"] == "gw.example" and doc["query"] == "a=1"
    for field in ("x-hop", "keep-alive", "te", "connection"):
        assert field not in doc["headers"]
    assert "x-kept" in doc["headers"]
    assert doc["headers"].count("x-gateway-peer") == 1
    assert "x-gateway-hold-s" not in doc["headers"]  # the control's word, never a client's
    assert "x-private" not in headers and "keep-alive" not in headers  # nor on the way back


async def test_a_control_plane_that_dies_mid_answer_cuts_the_client_off(site: Site) -> None:
    reader, writer = await connect(site.server.port)
    writer.write(get("/dies"))
    async with asyncio.timeout(WAIT_S):
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 OK")
    with pytest.raises(asyncio.IncompleteReadError):
        await read_chunked(reader)  # never the last chunk: the answer is known incomplete
    assert await closed(reader)
    reader, writer = await connect(site.server.port)  # the next request is served
    writer.write(get("/metrics"))
    assert (await answer(reader))[0] == 200


async def test_a_connection_the_control_plane_closed_while_idle_is_retried(site: Site) -> None:
    reader, writer = await connect(site.server.port)
    writer.write(get("/metrics"))
    assert (await answer(reader))[0] == 200
    ((pooled, _),) = site.proxy.pool._idle
    await until(lambda: pooled.transport is None or pooled.transport.is_closing())  # 1 s
    writer.write(get("/metrics"))
    assert (await answer(reader))[0] == 200


async def test_a_request_that_meets_a_pooled_connection_closing_is_sent_again(
    tmp_path: Path,
) -> None:
    """The race `ProxyPool.take` cannot see: the server closes as the request goes out."""
    path = str(tmp_path / "closing.sock")
    connections = []

    async def one_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\none")
        await reader.readuntil(b"\r\n\r\n")  # the next request on it: closed unanswered
        writer.close()

    control = await asyncio.start_unix_server(one_each, path)
    server = await serve(ClientLimits(min_body_rate=0), PathRouter(UnixProxy(path)))
    reader, writer = await connect(server.port)
    for _ in range(2):
        writer.write(get("/metrics"))
        assert (await answer(reader))[::2] == (200, b"one")
    assert len(connections) == 2
    for opened in connections:
        opened.close()
    control.close()
    await control.wait_closed()


async def test_a_control_plane_that_is_down_gives_a_json_503(tmp_path: Path) -> None:
    router = PathRouter(UnixProxy(str(tmp_path / "nobody.sock"), connect_timeout_s=0.5))
    server = await serve(ClientLimits(min_body_rate=0), router)
    reader, writer = await connect(server.port)
    writer.write(get("/metrics"))
    status, headers, body = await answer(reader)
    assert status == 503 and headers["retry-after"] == "1"
    assert orjson.loads(body) == {"error": "the control plane is unavailable"}


async def test_a_control_plane_that_answers_garbage_gives_a_json_502(tmp_path: Path) -> None:
    path = str(tmp_path / "garbage.sock")

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    rogue = await asyncio.start_unix_server(garbage, path)
    server = await serve(ClientLimits(min_body_rate=0), PathRouter(UnixProxy(path)))
    reader, writer = await connect(server.port)
    writer.write(get("/metrics"))
    status, _, body = await answer(reader)
    assert status == 502 and orjson.loads(body)["error"].startswith("the control plane failed")
    rogue.close()
    await rogue.wait_closed()


async def test_a_control_plane_that_does_not_answer_in_time_gives_a_json_504(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "silent.sock")
    opened = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(writer)
        await reader.readuntil(b"\r\n\r\n")

    control = await asyncio.start_unix_server(silent, path)
    proxy = UnixProxy(path, answer_timeout_s=0.3)
    server = await serve(ClientLimits(min_body_rate=0), PathRouter(proxy))
    reader, writer = await connect(server.port)
    writer.write(get("/metrics"))
    status, _, body = await answer(reader)
    assert status == 504
    assert orjson.loads(body) == {"error": "the control plane did not answer in time"}
    assert not proxy.pool._idle  # that connection is not used again
    for silent_writer in opened:
        silent_writer.close()
    control.close()
    await control.wait_closed()


@pytest.mark.parametrize("hold", [b"", b"x-gateway-hold-s: 2.5\r\n"], ids=["at-once", "held"])
async def test_an_answer_before_the_body_has_gone_reaches_the_client_and_ends_that_connection(
    tmp_path: Path, hold: bytes
) -> None:
    """The control answers (a wrong key's 401, held or not) from the head alone while the
    client's body is still on its way: the client gets that answer, not a 500, and the
    connection to the control, whose request was cut short, is not pooled again."""
    path = str(tmp_path / "early.sock")
    opened = []

    async def early(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        opened.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"error": "a wrong key"}'
        writer.write(b"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n%s" % hold)
        writer.write(b"content-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    control = await asyncio.start_unix_server(early, path)
    clock = FakeClock()
    proxy = UnixProxy(path, answer_timeout_s=5.0, clock=clock)
    server = await serve(ClientLimits(min_body_rate=0), PathRouter(proxy))
    reader, writer = await connect(server.port)
    try:
        # 2 of the 1,000 bytes it declares: the proxy's sender still waits for the rest
        writer.write(b"POST /admin/reload HTTP/1.1\r\nhost: gw\r\ncontent-length: 1000\r\n\r\n{}")
        status, _, body = await answer(reader)
        assert status == 401 and orjson.loads(body) == {"error": "a wrong key"}
        assert clock.slept == ([2.5] if hold else [])
        assert not proxy.pool._idle
    finally:
        writer.close()
        for control_writer in opened:
            control_writer.close()
        control.close()
        await within(server.drain(1.0))
        proxy.pool.close()


async def test_upgrades_are_not_forwarded(site: Site) -> None:
    reader, writer = await connect(site.server.port)
    writer.write(get("/ws", b"upgrade: websocket\r\n"))
    status, _, body = await answer(reader)
    assert status == 501 and b"not forwarded" in body


class HeldClock(FakeClock):
    """A clock whose ``sleep`` returns only once the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.go = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await self.go.wait()


async def test_a_held_answer_waits_for_its_client_alone_off_the_pools_connection(
    tmp_path: Path,
) -> None:
    """A wrong key's 401, which the control marks to be held: with one pooled connection,
    another client is answered while the first still waits, which then has its 401 without
    the mark."""
    path = str(tmp_path / "control.sock")

    async def held(request: StarletteRequest) -> Response:
        headers = {"x-gateway-hold-s": "2.5", "www-authenticate": "Bearer"}
        return JSONResponse({"error": "wrong key"}, status_code=401, headers=headers)

    app = Starlette(routes=[Route("/held", held), Route("/metrics", metrics)])
    control = uvicorn.Server(uvicorn.Config(app, uds=path, lifespan="off", log_level="critical"))
    serving = asyncio.create_task(control.serve())
    await until(lambda: control.started)
    clock = HeldClock()
    proxy = UnixProxy(path, connections=1, clock=clock)
    server = await serve(ClientLimits(min_body_rate=0), PathRouter(proxy))
    waiting_reader, waiting = await connect(server.port)
    waiting.write(get("/held"))
    try:
        await until(lambda: clock.slept)
        assert clock.slept == [2.5]
        reader, writer = await connect(server.port)
        writer.write(get("/metrics"))
        assert (await answer(reader))[0] == 200  # the one connection was free
        with pytest.raises(TimeoutError):  # still held
            async with asyncio.timeout(0.05):
                await waiting_reader.read(1)
    finally:
        clock.go.set()
    status, headers, body = await answer(waiting_reader)
    assert (status, orjson.loads(body)) == (401, {"error": "wrong key"})
    assert headers["www-authenticate"] == "bearer" and "x-gateway-hold-s" not in headers
    proxy.pool.close()
    control.should_exit = True
    await within(serving)


async def test_one_address_holds_at_most_its_share_of_the_pools_slots() -> None:
    shares = PeerSlots(2)
    for _ in range(2):
        await within(shares.acquire("10.0.0.9"))
    third = asyncio.ensure_future(shares.acquire("10.0.0.9"))
    await within(shares.acquire("10.0.0.1"))  # another address is not held up
    await asyncio.sleep(0)
    assert not third.done()
    shares.release("10.0.0.9")
    await within(third)
    for peer in ("10.0.0.9", "10.0.0.9", "10.0.0.1"):
        shares.release(peer)
    assert len(shares) == 0  # nothing kept for an address that holds nothing

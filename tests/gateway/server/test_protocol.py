"""The guarded HTTP protocol on real sockets: head size and read timeouts, nothing else changed.

A real uvicorn server with `guarded_protocol` runs in the test's loop on a free port; clients
are raw sockets, so trickling, oversized and half-sent requests are exactly what is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import uvicorn

from gateway.api.infer import BODY_TIMEOUT_KEY, CLIENT_LEFT_KEY
from gateway.server.protocol import (
    UvicornClientLimits,
    _OneWriteAnswer,
    guarded_protocol,
)

LIMITS = UvicornClientLimits(max_header_bytes=4096, header_timeout_s=0.5, body_timeout_s=0.5)
WAIT_S = 10.0  # the bound on every wait: generous, a busy machine must not fail these


@dataclass
class App:
    """Echoes the body's length; ``/early`` answers 413 without reading the body; ``/digest``
    answers the body's sha256 and how many messages it came in; ``/listen`` reads the body,
    then waits for the disconnect as Starlette's streaming answers do, counting receives;
    ``/hold`` and ``/answered`` offer the protocol a hook for a client that leaves (as the infer
    handler does) and read the body; ``/hold`` then waits to be told, ``/answered`` answers."""

    seen: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] in ("/hold", "/answered"):
            await self._hold(scope, receive, send)
            return
        if scope["path"] == "/early":
            await self._send(send, 413, {"error": "too large"})
            return
        if scope["path"] in ("/digest", "/listen"):
            await self._digest(scope["path"], receive, send)
            return
        size, event = 0, {"type": ""}
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                self.seen.append({"disconnect": True, "timeout": scope.get(BODY_TIMEOUT_KEY)})
                await self._send(send, 400, {"error": "dropped"})  # must not reach the client
                return
            size += len(event.get("body", b""))
            if not event.get("more_body"):
                break
        self.seen.append({"size": size})
        await self._send(send, 200, {"size": size})

    async def _digest(self, path: str, receive: Any, send: Any) -> None:
        digest, messages, more = hashlib.sha256(), 0, True
        while more:
            event = await receive()
            assert event["type"] == "http.request", event
            assert isinstance(event["body"], bytes)
            digest.update(event["body"])
            messages += 1
            more = event.get("more_body", False)
        if path == "/listen":  # after the body, receive() must wait for the disconnect
            self.seen.append({"listening": messages})
            event = await receive()
            self.seen.append({"after_body": event["type"], "messages": messages})
            return
        await self._send(send, 200, {"sha256": digest.hexdigest(), "messages": messages})

    async def _hold(self, scope: Any, receive: Any, send: Any) -> None:
        told = asyncio.Event()

        def left() -> None:
            self.seen.append({"left": scope["path"]})
            told.set()

        scope[CLIENT_LEFT_KEY] = left
        while (await receive()).get("more_body"):
            pass
        if scope["path"] == "/answered":
            await self._send(send, 200, {"answered": True})
            return
        self.seen.append({"holding": scope["path"]})
        async with asyncio.timeout(WAIT_S):
            await told.wait()

    @staticmethod
    async def _send(send: Any, status: int, doc: Any) -> None:
        body = orjson.dumps(doc)
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@dataclass
class Served:
    app: App
    port: int


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    app = App()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        http=guarded_protocol(LIMITS),
        lifespan="off",
        log_level="warning",
        timeout_keep_alive=1,
    )
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await _until(lambda: server.started)
    yield Served(app, sock.getsockname()[1])
    server.should_exit = True
    await asyncio.wait_for(task, WAIT_S)


async def _until(predicate: Any) -> None:
    """Polls ``predicate`` every 10 ms; `TimeoutError` after `WAIT_S`."""
    for _ in range(int(WAIT_S / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("condition not met in time")


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers, body (read by content-length), within the bound."""
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
        body = await reader.readexactly(int(headers["content-length"]))
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


async def test_whole_and_quickly_split_requests_are_served_on_a_kept_alive_connection(
    served: Served,
) -> None:
    reader, writer = await connect(served.port)
    writer.write(post("/", b"abc") + post("/", b""))  # pipelined
    assert (await answer(reader))[::2] == (200, b'{"size":3}')
    assert (await answer(reader))[::2] == (200, b'{"size":0}')
    message = post("/", b"x" * 10_000)
    writer.write(message[:20])
    await asyncio.sleep(0.05)
    writer.write(message[20:5000])
    await asyncio.sleep(0.05)
    writer.write(message[5000:])
    assert (await answer(reader))[::2] == (200, b'{"size":10000}')
    writer.close()


async def test_a_pipelined_head_after_a_large_body_is_not_counted_with_it(served: Served) -> None:
    reader, writer = await connect(served.port)
    second = post("/", b"z" * 7)
    writer.write(post("/", b"b" * 20_000) + second[:30])  # one chunk: body over the head limit
    await asyncio.sleep(0.1)
    writer.write(second[30:])
    assert (await answer(reader))[::2] == (200, b'{"size":20000}')
    assert (await answer(reader))[::2] == (200, b'{"size":7}')
    writer.close()


async def test_a_connection_that_sends_nothing_gets_408_and_is_closed(served: Served) -> None:
    reader, writer = await connect(served.port)
    status, headers, body = await answer(reader)
    assert status == 408 and headers["connection"] == "close"
    assert orjson.loads(body) == {"error": "request headers not complete within 0.5 s"}
    assert await closed(reader)
    writer.close()


async def test_trickled_headers_are_cut_with_408(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"GET / HTTP/1.1\r\n")

    async def trickle() -> None:
        for _ in range(100):
            writer.write(b"x")
            await asyncio.sleep(0.05)

    trickling = asyncio.create_task(trickle())
    status, _, body = await answer(reader)
    assert status == 408 and b"request headers not complete" in body
    assert await closed(reader)
    trickling.cancel()
    writer.close()


async def test_a_trickled_body_is_cut_with_408_and_the_app_is_told(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(post("/", b"x" * 100)[:-90])  # the head and 10 bytes of the body
    status, _, body = await answer(reader)
    assert status == 408
    assert orjson.loads(body) == {"error": "request body not complete within 0.5 s"}
    assert await closed(reader)
    await _until(lambda: served.app.seen)
    assert served.app.seen == [{"disconnect": True, "timeout": 0.5}]  # its 400 was dropped
    writer.close()


@pytest.mark.parametrize("kind", ["many headers", "one huge header", "huge url"])
async def test_a_head_over_the_limit_gets_431(served: Served, kind: str) -> None:
    reader, writer = await connect(served.port)
    if kind == "many headers":
        writer.write(b"GET / HTTP/1.1\r\n" + b"x-h: %s\r\n" % (b"v" * 100) * 50 + b"\r\n")
    elif kind == "one huge header":
        writer.write(b"GET / HTTP/1.1\r\nx-big: " + b"a" * 20_000)  # still incomplete
    else:
        writer.write(b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n")
    status, headers, body = await answer(reader)
    assert status == 431 and headers["connection"] == "close"
    assert orjson.loads(body) == {"error": "request line and headers over 4096 bytes"}
    assert await closed(reader)
    writer.close()


async def test_a_client_still_sending_a_huge_head_is_cut_off(served: Served) -> None:
    _, writer = await connect(served.port)
    writer.write(b"GET / HTTP/1.1\r\nx-big: ")
    sent = 0
    with pytest.raises(ConnectionError):
        async with asyncio.timeout(WAIT_S):
            while sent < 55 * 1024 * 1024:
                writer.write(b"a" * 65536)
                await writer.drain()
                sent += 65536
    assert sent < 8 * 1024 * 1024  # read at most the limit, a read or two and the linger
    writer.close()


async def test_an_early_answer_drops_the_body_then_keep_alive_applies(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(post("/early", b"y" * 200_000))
    assert (await answer(reader))[0] == 413
    writer.write(post("/", b"after"))  # the same connection still serves
    assert (await answer(reader))[::2] == (200, b'{"size":5}')
    assert await closed(reader)  # idle: uvicorn's keep-alive timeout (1 s) closes it
    writer.close()


async def test_a_body_left_half_sent_after_an_early_answer_is_cut(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(post("/early", b"y" * 1000)[:-900])
    assert (await answer(reader))[0] == 413
    assert await closed(reader)  # the body timeout still bounds the rest
    writer.close()


async def test_unparseable_http_gets_a_json_400(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"NOT HTTP\r\n\r\n")
    status, _, body = await answer(reader)
    assert status == 400 and orjson.loads(body)["error"].startswith("invalid HTTP request")
    writer.close()


class RecordingTransport:
    """Records each write(2)-level call the wrapper makes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_an_answer_head_leaves_with_its_first_body_chunk_in_one_write() -> None:
    transport = RecordingTransport()
    answer_ = _OneWriteAnswer(transport)  # type: ignore[arg-type]
    answer_.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # interim: never held
    answer_.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    answer_.write(b"body")
    answer_.write(b"more")
    assert transport.writes[1:] == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]


def test_a_large_body_leaves_with_its_head_in_one_vectored_write_uncopied() -> None:
    sent: list[tuple[bytes, ...]] = []

    class Vectored(RecordingTransport):
        def writelines(self, data: tuple[bytes, ...]) -> None:
            sent.append(tuple(data))

    answer_ = _OneWriteAnswer(Vectored())  # type: ignore[arg-type]
    head, body = b"HTTP/1.1 200 OK\r\n\r\n", bytes(600_000)
    answer_.write(head)
    answer_.write(body)
    assert len(sent) == 1 and sent[0][0] == head and sent[0][1] is body


def test_a_held_head_is_sent_before_the_connection_closes() -> None:
    transport = RecordingTransport()
    answer_ = _OneWriteAnswer(transport)  # type: ignore[arg-type]
    answer_.write(b"HTTP/1.1 200 OK\r\n\r\n")
    answer_.close()
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n"] and transport.closed


async def test_head_and_expect_continue_requests_are_answered_whole(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"HEAD / HTTP/1.1\r\nhost: t\r\n\r\n")
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: 10\r\n" in head
    writer.close()
    reader, writer = await connect(served.port)
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n")
    async with asyncio.timeout(WAIT_S):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"abc")
    assert (await answer(reader))[::2] == (200, b'{"size":3}')
    writer.close()


async def test_keep_alive_closes_an_idle_connection_a_timeout_after_its_last_answer(
    served: Served,
) -> None:
    """One timer per connection: the first idle spell's timer must not cut a later spell short."""
    loop = asyncio.get_running_loop()
    reader, writer = await connect(served.port)
    writer.write(post("/", b"a"))
    assert (await answer(reader))[0] == 200
    await asyncio.sleep(0.7)  # idle; the keep-alive timeout (1 s) is not reached
    writer.write(post("/", b"b"))
    assert (await answer(reader))[0] == 200
    await asyncio.sleep(0.5)  # 1.2 s after the first answer: open, it was busy at 0.7 s
    writer.write(post("/", b"c"))
    assert (await answer(reader))[0] == 200
    answered = loop.time()
    assert await closed(reader)
    assert 1.0 - 0.01 <= loop.time() - answered < WAIT_S
    writer.close()


@pytest.mark.parametrize(
    ("refused", "why", "allowed"),
    [
        (
            b"GET / HTTP/1.1\r\nHost: localhost\r\nhost: evil.example\r\n\r\n",
            "more than one Host header",
            post("/", b"ok"),
        ),  # one Host: served as before
        (
            b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\nok",
            "an HTTP/1.1 request without a Host header",
            b"POST / HTTP/1.0\r\ncontent-length: 2\r\n\r\nok",
        ),  # HTTP/1.0 may omit it
    ],
    ids=["two-hosts", "no-host"],
)
async def test_a_head_with_two_hosts_or_none_gets_a_json_400_and_the_connection_closes(
    served: Served, refused: bytes, why: str, allowed: bytes
) -> None:
    reader, writer = await connect(served.port)
    writer.write(refused)
    status, headers, body = await answer(reader)
    assert status == 400 and headers["connection"] == "close"
    assert orjson.loads(body) == {"error": f"invalid HTTP request: {why} (RFC 9112, 3.2)"}
    assert await closed(reader) and served.app.seen == []
    writer.close()
    reader, writer = await connect(served.port)
    writer.write(allowed)
    assert (await answer(reader))[::2] == (200, b'{"size":2}')
    writer.close()


async def test_a_large_body_reaches_the_app_whole_in_the_pieces_it_arrived_in(
    served: Served,
) -> None:
    body = bytes(range(256)) * 16 * 1024  # 4 MiB: reading pauses and resumes on the way
    reader, writer = await connect(served.port)
    writer.write(post("/digest", body))
    status, _, doc = await answer(reader)
    got = orjson.loads(doc)
    assert status == 200 and got["sha256"] == hashlib.sha256(body).hexdigest()
    assert got["messages"] > 1  # handed over as read, never grown into one buffer
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:7], body[7:300_000]))
    writer.write(
        b"POST /digest HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
        + chunked
        + b"0\r\n\r\n"
    )
    status, _, doc = await answer(reader)
    assert (
        status == 200 and orjson.loads(doc)["sha256"] == hashlib.sha256(body[:300_000]).hexdigest()
    )
    writer.close()


async def test_after_the_body_receive_waits_for_the_disconnect_instead_of_spinning(
    served: Served,
) -> None:
    _, writer = await connect(served.port)
    writer.write(post("/listen", b"x" * 100_000))
    await _until(lambda: any("listening" in s for s in served.app.seen))
    await asyncio.sleep(0.1)  # a spinning receive() would have returned by now
    assert not any("after_body" in s for s in served.app.seen)
    writer.close()
    await _until(lambda: any("after_body" in s for s in served.app.seen))
    (after,) = [s for s in served.app.seen if "after_body" in s]
    assert after["after_body"] == "http.disconnect"


async def test_a_connection_lost_before_the_answer_calls_the_apps_hook(served: Served) -> None:
    """The infer handler's hook (it cancels the request) is called when the client leaves."""
    _, writer = await connect(served.port)
    writer.write(post("/hold", b"x" * 100))
    await _until(lambda: {"holding": "/hold"} in served.app.seen)
    writer.close()
    await _until(lambda: {"left": "/hold"} in served.app.seen)


async def test_a_pipelined_request_does_not_hide_the_running_ones_hook(served: Served) -> None:
    """Under pipelining the cycle whose app runs is not the last one parsed: it is told."""
    _, writer = await connect(served.port)
    writer.write(post("/hold", b"x") + post("/", b"queued"))
    await _until(lambda: {"holding": "/hold"} in served.app.seen)
    await asyncio.sleep(0.05)  # the queued request's head is parsed meanwhile
    writer.close()
    await _until(lambda: {"left": "/hold"} in served.app.seen)
    assert not any("size" in s for s in served.app.seen)  # the queued one never ran


async def test_a_connection_closed_after_the_answer_calls_no_hook(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(post("/answered", b"x"))
    assert (await answer(reader))[::2] == (200, b'{"answered":true}')
    writer.write(post("/", b"abc"))  # the next request on the connection is served as ever
    assert (await answer(reader))[::2] == (200, b'{"size":3}')
    writer.close()
    await asyncio.sleep(0.1)  # a hook called on close would be in by now
    assert not any("left" in s for s in served.app.seen)

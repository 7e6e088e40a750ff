"""A body read straight into one buffer gives the caller what the parser's own path gives.

`Connection` reads a body of ``direct_body_min_bytes`` or more into one buffer of its declared
size instead of collecting httptools' pieces. Differential: on every reply the framing fuzz
generates (interim answers, bad framing, truncation, bytes after the reply, any split), the
direct path (threshold 1 byte, so every Content-Length body takes it) and the parser's path
(threshold above any body) reach the same verdict: same reply, same error class, same reuse.
Then one real socket: a 3 MB reply over loopback in the loop's own reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.http1 import Http1Transport
from gateway.upstream.transport.limits import ReplyLimits
from tests.gateway.upstream.transport.test_framing_fuzz import CASES, FUZZ, reads
from tests.gateway.upstream.wire import Result, exchange

DIRECT = ReplyLimits(direct_body_min_bytes=1)
PARSER = ReplyLimits(direct_body_min_bytes=1 << 40)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    new = asyncio.new_event_loop()
    try:
        yield new
    finally:
        new.close()


def _verdict(result: Result) -> tuple[object, ...]:
    reply = result.reply
    error = type(result.error).__name__ if result.error is not None else None
    if reply is None:
        return (None, error, result.reusable)
    return ((reply.status, dict(reply.headers), reply.body), error, result.reusable)


@FUZZ
@given(data=st.data())
def test_direct_body_agrees_with_the_parser(
    loop: asyncio.AbstractEventLoop, data: st.DataObject
) -> None:
    case = data.draw(CASES)
    chunks = data.draw(reads(case.wire))
    direct = exchange(loop, chunks, head=case.head, limits=DIRECT)
    parsed = exchange(loop, chunks, head=case.head, limits=PARSER)
    assert _verdict(direct) == _verdict(parsed)
    assert isinstance(direct.reply.body if direct.reply else b"", bytes)


def test_a_large_reply_over_a_socket_is_read_whole_and_the_connection_reused() -> None:
    body = bytes(range(256)) * (3 * 4096)  # 3 MiB, over the default threshold
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body)

    async def scenario() -> tuple[list[bytes], int]:
        served = 0

        ended = asyncio.Event()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal served
            try:
                while await reader.readuntil(b"\r\n\r\n"):
                    served += 1
                    writer.write(head + body[:1000])  # the head and a body piece in one read
                    await writer.drain()
                    writer.write(body[1000:])
                    await writer.drain()
            except asyncio.IncompleteReadError:
                writer.close()  # the client closed its connection: not an error to log
            finally:
                ended.set()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport = Http1Transport()
        endpoint = Endpoint.parse(f"http://127.0.0.1:{port}")
        try:
            bodies = [
                (await transport.request(endpoint, "GET", "/", timeout=10.0)).body for _ in range(3)
            ]
        finally:
            await transport.aclose()
            server.close()
            await asyncio.wait_for(ended.wait(), timeout=10.0)  # the one connection's handler
        return bodies, served

    bodies, served = asyncio.run(scenario())
    assert bodies == [body] * 3
    assert served == 3


def test_after_the_head_the_loop_reads_the_body_into_one_buffer_and_no_further(
    loop: asyncio.AbstractEventLoop,
) -> None:
    from gateway.upstream.transport.http1_connection import Connection
    from tests.gateway.upstream.wire import FakeTransport

    conn = Connection(loop, lambda _: None, DIRECT)
    conn.connection_made(FakeTransport())
    waiter = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 60.0)
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n1234")
    view = conn.get_buffer(65536)
    assert len(view) == 6  # the rest of this body, never the next reply's bytes
    view[:6] = b"567890"
    conn.buffer_updated(6)
    assert waiter.result().body == b"1234567890" and conn.reusable

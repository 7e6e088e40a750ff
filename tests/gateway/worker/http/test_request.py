"""A request's body: handed over in order as it arrived, reading paused while too much waits
unread, ``100-continue`` asked for only by a handler that reads, and the server's stop."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from gateway.errors import RequestTimeout
from gateway.worker.http.answer import Answer
from gateway.worker.http.connections import Connections
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.protocol import HttpProtocol
from gateway.worker.http.request import HIGH_WATER_BYTES, Request
from gateway.worker.http.router import Router
from tests.gateway.worker.http.wire import FakeTransport


class Flow:
    def __init__(self) -> None:
        self.taken = 0
        self.continued = 0

    def body_taken(self) -> None:
        self.taken += 1

    def continue_body(self) -> None:
        self.continued += 1


def request(expects: bool = False) -> tuple[Request, Flow]:
    flow = Flow()
    headers = [(b"host", b"t"), (b"x-a", b"1"), (b"x-a", b"2")]
    raw = b"/v2/models/a%20b/infer"
    return Request(flow, "POST", raw, b"q=1", headers, {}, "1.1", True, "::1", expects), flow


async def test_chunks_come_out_in_order_one_a_read_then_the_end() -> None:
    body, _ = request()
    for chunk in (b"ab", b"", b"cde"):
        body.arrived(chunk)
    body.end_body()
    got = [await body.read() for _ in range(4)]
    assert got == [(b"ab", True), (b"", True), (b"cde", False), (b"", False)]
    assert body.received == 5 and body.buffered == 0


async def test_over_the_high_water_mark_the_connection_is_told_to_pause_and_resume() -> None:
    body, flow = request()
    piece = b"x" * (HIGH_WATER_BYTES // 2)
    assert not body.arrived(piece) and not body.arrived(piece)  # at the mark, not over it
    assert body.arrived(b"y")
    await body.read()
    assert flow.taken == 1 and body.buffered == HIGH_WATER_BYTES // 2 + 1


async def test_an_empty_queue_waits_for_the_next_chunk() -> None:
    body, _ = request()
    waiting = asyncio.ensure_future(body.read())
    await asyncio.sleep(0)
    assert not waiting.done()
    body.arrived(b"late")
    assert await asyncio.wait_for(waiting, 5) == (b"late", True)


async def test_continue_is_asked_for_on_the_first_read_only_if_the_body_is_held_back() -> None:
    body, flow = request(expects=True)
    waiting = asyncio.ensure_future(body.read())
    await asyncio.sleep(0)
    assert flow.continued == 1
    body.arrived(b"a")
    await asyncio.wait_for(waiting, 5)
    sent, flow_sent = request(expects=True)
    sent.arrived(b"a")  # the client did not wait
    await sent.read()
    assert flow_sent.continued == 0


async def test_a_stopped_body_raises_what_the_server_answered() -> None:
    body, _ = request()
    body.arrived(b"a")
    waiting = asyncio.ensure_future(body.read())
    assert await waiting == (b"a", True)
    waiting = asyncio.ensure_future(body.read())
    await asyncio.sleep(0)
    body.stop(RequestTimeout("slow"))
    with pytest.raises(RequestTimeout, match="slow"):
        await asyncio.wait_for(waiting, 5)


def test_the_head_is_read_as_sent() -> None:
    body, _ = request()
    assert body.path == "/v2/models/a b/infer" and body.query == b"q=1"
    assert body.header(b"x-a") == b"2" and body.header(b"nope") is None


async def test_an_answered_request_is_freed_without_the_cyclic_collector() -> None:
    """Nothing a request and its answer hold refers back to them: freed by reference count as
    soon as the answer is written, not at the collector's next pass (which the gateway's
    settings make rare), so a burst of large bodies does not stay in memory after it."""
    refs: list[weakref.ref[object]] = []

    async def handler(request: Request, answer: Answer) -> None:
        refs.extend((weakref.ref(request), weakref.ref(answer)))
        await request.read()
        answer.send(200, b"", b"ok")

    limits = ClientLimits()
    protocol = HttpProtocol(Router(handler), limits, Connections(limits), {})
    transport = FakeTransport()
    protocol.connection_made(transport)
    gc.disable()
    try:
        protocol.data_received(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\n\r\nabc")
        for _ in range(5):
            await asyncio.sleep(0)
        assert transport.written.startswith(b"HTTP/1.1 200 OK")
        assert len(refs) == 2 and [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()
        protocol.connection_lost(None)

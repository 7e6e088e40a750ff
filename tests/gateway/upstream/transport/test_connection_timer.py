"""`Connection` deadlines with one loop timer kept across exchanges: never late, never early.

A real event loop runs the timers; the peer is a fake transport that the test answers.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import UpstreamTimeout
from gateway.upstream.transport.base import Reply
from gateway.upstream.transport.http1_connection import Connection
from tests.gateway.upstream.wire import FakeTransport

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
SLACK_S = 0.5  # a busy machine's loop may run a timer this late; never earlier than due


def _connection(loop: asyncio.AbstractEventLoop) -> tuple[Connection, FakeTransport]:
    conn = Connection(loop, lambda _: None)
    wire = FakeTransport()
    conn.connection_made(wire)
    return conn, wire


async def _timed_out_after(waiter: asyncio.Future[Reply], started: float) -> float:
    with pytest.raises(UpstreamTimeout):
        await asyncio.wait_for(waiter, 10.0)
    return asyncio.get_running_loop().time() - started


async def test_a_later_deadline_is_not_cut_by_the_timer_an_earlier_exchange_armed() -> None:
    loop = asyncio.get_running_loop()
    conn, _ = _connection(loop)
    first = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 0.05)
    conn.data_received(OK)
    assert first.result().status == 200 and conn.reusable
    started = loop.time()
    second = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", started + 0.3)
    await asyncio.sleep(0.15)  # the first exchange's timer has fired by now
    assert not second.done()
    assert 0.3 - 0.002 <= await _timed_out_after(second, started) < 0.3 + SLACK_S


async def test_an_earlier_deadline_than_the_armed_timer_is_kept() -> None:
    loop = asyncio.get_running_loop()
    conn, wire = _connection(loop)
    first = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 3600.0)
    conn.data_received(OK)
    assert first.result().status == 200
    started = loop.time()
    second = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", started + 0.05)
    assert await _timed_out_after(second, started) < 0.05 + SLACK_S
    assert wire.aborted  # a late reply can never be read by the next exchange


async def test_an_idle_connection_outlives_its_last_deadline_and_times_out_afresh() -> None:
    loop = asyncio.get_running_loop()
    conn, _ = _connection(loop)
    first = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 0.02)
    conn.data_received(OK)
    assert first.result().status == 200
    await asyncio.sleep(0.1)  # the timer fired while idle: nothing happens
    assert conn.reusable
    second = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 0.05)
    conn.data_received(OK)
    assert second.result().status == 200
    started = loop.time()
    third = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", started + 0.05)
    assert await _timed_out_after(third, started) < 0.05 + SLACK_S


async def test_a_closed_connection_leaves_no_timer() -> None:
    loop = asyncio.get_running_loop()
    conn, _ = _connection(loop)
    first = conn.exchange(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 0.05)
    conn.data_received(OK)
    assert first.result().status == 200
    conn.connection_lost(None)
    assert conn._timer is None

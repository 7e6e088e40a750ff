"""A reply's body is held in its request's room before it is read (`AnswerRoom`).

One `Connection` fed by hand (`tests.gateway.upstream.wire`), with a room whose answers the test
decides: a body within ``answer_free`` asks nothing; a larger one asks for its Content-Length
before its buffer is made, or, without one, for what has arrived plus one read; where the room
is not there at once the connection stops reading until the wait ends, then reads on or fails
with the room's refusal, its connection dropped with the body unread.
"""

from __future__ import annotations

import asyncio

from gateway.errors import Overloaded, UpstreamError
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.upstream.transport.http1_connection import Connection
from tests.gateway.upstream.wire import FakeTransport

FREE = 64 * 1024
LARGE = 300_000  # read straight into one buffer (over direct_body_min_bytes)


class Wire(FakeTransport):
    """Also records whether reading is paused."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Room:
    """A room that has room at once or not (``now``); a wait ends when the test says."""

    def __init__(self, now: bool) -> None:
        self.answer_free = FREE
        self.now = now
        self.asked: list[int] = []
        self.waits: list[asyncio.Future[None]] = []

    def hold_answer(self, size: int) -> bool:
        self.asked.append(size)
        return self.now

    async def wait_answer(self, size: int) -> None:
        self.waits.append(asyncio.get_running_loop().create_future())
        await self.waits[-1]


def _open(room: AnswerRoom) -> tuple[Connection, Wire, asyncio.Future[Reply]]:
    loop = asyncio.get_running_loop()
    conn = Connection(loop, lambda _: None)
    wire = Wire()
    conn.connection_made(wire)
    waiter = conn.exchange(b"POST / HTTP/1.1\r\n\r\n", loop.time() + 3600.0, room=room)
    return conn, wire, waiter


def _head(size: int) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size


async def _turn() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_reply_within_what_is_free_asks_nothing() -> None:
    room = Room(now=False)
    conn, wire, waiter = _open(room)
    conn.data_received(_head(FREE) + b"x" * FREE)
    assert waiter.done() and len(waiter.result().body) == FREE
    assert room.asked == [] and not wire.paused and conn.reusable


async def test_a_large_reply_is_held_for_its_length_before_it_is_read() -> None:
    room = Room(now=True)
    conn, wire, waiter = _open(room)
    conn.data_received(_head(LARGE) + b"x" * 1000)
    assert room.asked == [LARGE] and not wire.paused
    conn.data_received(b"x" * (LARGE - 1000))
    assert len(waiter.result().body) == LARGE and conn.reusable


async def test_without_room_at_once_reading_stops_until_the_wait_gives_it() -> None:
    room = Room(now=False)
    conn, wire, waiter = _open(room)
    conn.data_received(_head(LARGE) + b"x" * 1000)
    await _turn()
    assert room.asked == [LARGE] and len(room.waits) == 1 and wire.paused
    assert not waiter.done()
    room.waits[0].set_result(None)
    await _turn()
    assert not wire.paused  # reading resumes; the body goes into its buffer
    conn.data_received(b"x" * (LARGE - 1000))
    assert len(waiter.result().body) == LARGE and conn.reusable


async def test_a_refused_wait_fails_the_exchange_and_drops_the_connection_unread() -> None:
    room = Room(now=False)
    conn, wire, waiter = _open(room)
    conn.data_received(_head(LARGE) + b"x" * 1000)
    await _turn()
    room.waits[0].set_exception(Overloaded("no room"))
    await _turn()
    assert isinstance(waiter.exception(), Overloaded)
    assert wire.aborted and not conn.reusable


async def test_a_body_without_a_length_is_held_as_it_arrives() -> None:
    room = Room(now=True)
    conn, wire, waiter = _open(room)
    conn.data_received(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n%s\r\n" % (FREE, b"y" * FREE)
    conn.data_received(chunk)
    assert room.asked == []  # within what is free
    conn.data_received(chunk)
    # what has arrived, plus one read
    assert room.asked == [2 * FREE + 64 * 1024]
    room.now = False
    for _ in range(2):
        conn.data_received(chunk)
    await _turn()
    assert room.asked[-1] == 3 * FREE + 2 * 64 * 1024 and wire.paused
    room.waits[0].set_result(None)
    await _turn()
    assert not wire.paused
    conn.data_received(b"0\r\n\r\n")
    assert len(waiter.result().body) == 4 * FREE


async def test_an_exchange_that_ends_while_it_waits_stops_the_wait() -> None:
    room = Room(now=False)
    conn, _, waiter = _open(room)
    conn.data_received(_head(LARGE) + b"x" * 1000)
    await _turn()
    conn.abort()  # its request's deadline, or its client gone
    conn.connection_lost(None)
    await _turn()
    assert room.waits[0].cancelled()
    assert waiter.done() and isinstance(waiter.exception(), UpstreamError)

"""An answer's bytes and writes: one write for a small one, an uncopied iovec for a large one,
``connection`` as the request and the server need it, and when it has really been sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.worker.http.answer import Answer, Date
from gateway.worker.http.request import Request


class Transport:
    def __init__(self) -> None:
        self.writes: list[Any] = []
        self.aborted = False
        self.unsent = 0

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, data: Any) -> None:
        self.writes.append(tuple(data))

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return self.unsent


class Conn:
    """The connection as an answer sees it; records what it is told."""

    def __init__(self, closing: bool = False) -> None:
        self.transport: Any = Transport()
        self.closing = closing
        self.told: list[bool] = []
        self.drains = 0

    def written(self, answer: Answer, close: bool) -> None:
        self.told.append(close)

    async def drained(self) -> None:
        self.drains += 1
        self.transport.unsent = 0


class Flow:
    def body_taken(self) -> None:
        pass

    def continue_body(self) -> None:
        pass


def request(method: str = "POST", version: str = "1.1", keep_alive: bool = True) -> Request:
    return Request(Flow(), method, b"/", b"", [], {}, version, keep_alive, "127.0.0.1", False)


def answer(**kwargs: Any) -> tuple[Answer, Conn]:
    closing = kwargs.pop("closing", False)
    conn = Conn(closing)
    return Answer(conn, request(**kwargs)), conn


def test_a_small_answer_is_one_write_with_date_lines_and_length() -> None:
    answer_, conn = answer()
    answer_.send(200, b"x-a: 1\r\n", b"hello")
    assert conn.transport.writes == [
        b"HTTP/1.1 200 OK\r\n" + Date.line + b"x-a: 1\r\ncontent-length: 5\r\n\r\nhello"
    ]
    assert conn.told == [False] and answer_.complete
    with pytest.raises(RuntimeError, match="answered already"):
        answer_.send(200)


def test_a_large_body_leaves_with_its_head_in_one_vectored_write_uncopied() -> None:
    answer_, conn = answer()
    body = bytes(600_000)
    answer_.send(200, b"", body)
    ((head, sent),) = conn.transport.writes
    assert head.endswith(b"content-length: 600000\r\n\r\n") and sent is body


def test_pieces_leave_after_the_head_uncopied() -> None:
    answer_, conn = answer()
    pieces: list[bytes | memoryview] = [b"ab", memoryview(b"cde")]
    answer_.send_pieces(200, b"", pieces)
    ((head, *sent),) = conn.transport.writes
    assert b"content-length: 5\r\n" in head and sent[1] is pieces[1]


@pytest.mark.parametrize(
    ("kwargs", "line"),
    [
        ({}, None),
        ({"keep_alive": False}, b"connection: close"),
        ({"closing": True}, b"connection: close"),
        ({"version": "1.0"}, b"connection: keep-alive"),
        ({"version": "1.0", "keep_alive": False}, b"connection: close"),
    ],
)
def test_the_connection_line_says_what_follows(kwargs: dict[str, Any], line: bytes | None) -> None:
    answer_, conn = answer(**kwargs)
    answer_.send(204)
    (head,) = conn.transport.writes
    assert b"content-length" not in head  # a 204 has none
    lines = [x for x in head.split(b"\r\n") if x.startswith(b"connection")]
    assert lines == ([] if line is None else [line])
    assert conn.told == [line == b"connection: close"]


def test_a_head_request_gets_the_length_but_no_body() -> None:
    answer_, conn = answer(method="HEAD")
    answer_.send(200, b"", b"hello")
    (head,) = conn.transport.writes
    assert head.endswith(b"content-length: 5\r\n\r\n")


def test_a_dropped_answer_writes_nothing_and_is_never_flushed() -> None:
    answer_, conn = answer()
    answer_.dropped = True
    seen: list[bool] = []
    answer_.when_flushed(seen.append)
    answer_.send(200, b"", b"x")
    assert conn.transport.writes == [] and conn.told == [] and seen == [False]


async def test_flushed_is_told_once_whether_waited_for_or_called_back() -> None:
    answer_, _ = answer()
    seen: list[bool] = []
    answer_.when_flushed(seen.append)
    waiting = asyncio.ensure_future(answer_.wait_flushed())
    await asyncio.sleep(0)
    assert not waiting.done() and answer_.flushed is None
    answer_.settle(True)
    answer_.settle(False)  # too late: it was sent
    assert await asyncio.wait_for(waiting, 5) is True and seen == [True]
    answer_.when_flushed(seen.append)  # known already: at once
    assert seen == [True, True]


async def test_a_streamed_answer_is_chunked_and_waits_while_the_transport_is_full() -> None:
    answer_, conn = answer()
    answer_.start(200, b"x-a: 1\r\n")
    conn.transport.unsent = 10**6
    await answer_.write(b"abc")
    answer_.end()
    head, chunk, last = conn.transport.writes
    assert b"transfer-encoding: chunked\r\n" in head and b"content-length" not in head
    assert chunk == (b"3\r\n", b"abc", b"\r\n") and last == b"0\r\n\r\n"
    assert conn.drains == 1 and conn.told == [False]


async def test_a_streamed_answer_to_http10_ends_with_the_connection() -> None:
    answer_, conn = answer(version="1.0")
    answer_.start(200)
    await answer_.write(b"abc")
    answer_.end()
    assert b"connection: close\r\n" in conn.transport.writes[0]
    assert conn.transport.writes[1:] == [b"abc"] and conn.told == [True]


def test_an_aborted_stream_cuts_the_connection() -> None:
    answer_, conn = answer()
    answer_.start(200, b"", 10)
    answer_.abort()
    assert conn.transport.aborted and answer_.flushed is False and answer_.complete


def test_a_failing_flushed_callback_spoils_neither_the_others_nor_the_connection() -> None:
    answer_, _ = answer()
    seen: list[bool] = []

    def broken(flushed: bool) -> None:
        raise RuntimeError("a handler's bug")

    answer_.when_flushed(broken)
    answer_.when_flushed(seen.append)
    answer_.settle(True)
    assert seen == [True]

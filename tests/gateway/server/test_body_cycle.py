"""The body's chunks queue: handed over in order, reading paused while too much waits unread."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.server.body_cycle import HIGH_WATER_BYTES, PiecesCycle


class Flow:
    def __init__(self) -> None:
        self.paused = False
        self.pauses = 0

    def pause_reading(self) -> None:
        self.pauses += not self.paused
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Transport:
    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        raise AssertionError("nothing is written while a body is read")


def cycle() -> tuple[PiecesCycle, Flow]:
    flow = Flow()
    scope: Any = {"type": "http", "method": "POST", "path": "/"}
    raw = RequestResponseCycle(
        scope=scope, transport=Transport(), flow=flow, logger=logging.getLogger("t"),  # type: ignore[arg-type]
        access_logger=logging.getLogger("t"), access_log=False, default_headers=[],
        message_event=asyncio.Event(), expect_100_continue=False, keep_alive=True,
        on_response=lambda: None,
    )  # fmt: skip
    return PiecesCycle.adopt(raw), flow


async def test_chunks_come_out_in_order_one_a_message_then_the_end() -> None:
    body, _ = cycle()
    for chunk in (b"ab", b"", b"cde"):
        body.add(chunk)
    body.more_body = False
    got = [await body.receive() for _ in range(3)]
    assert [(m["body"], m["more_body"]) for m in got] == [  # type: ignore[typeddict-item]
        (b"ab", True),
        (b"", True),
        (b"cde", False),
    ]


async def test_reading_pauses_over_the_high_water_mark_and_resumes_once_taken() -> None:
    body, flow = cycle()
    piece = b"x" * (HIGH_WATER_BYTES // 2)
    body.add(piece)
    body.add(piece)
    assert not flow.paused  # at the mark, not over it
    body.add(b"y")
    assert flow.paused
    await body.receive()
    assert not flow.paused and body.waiting == HIGH_WATER_BYTES // 2 + 1


async def test_an_empty_queue_waits_for_the_next_chunk() -> None:
    body, _ = cycle()
    waiting = asyncio.ensure_future(body.receive())
    await asyncio.sleep(0)
    assert not waiting.done()
    body.add(b"late")
    message = await asyncio.wait_for(waiting, 5)
    assert message["body"] == b"late" and message["more_body"]  # type: ignore[typeddict-item]

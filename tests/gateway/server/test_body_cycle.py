"""The body's chunks queue: handed over in order, reading paused while too much waits unread."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref
from typing import Any

from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.api.responses import ANSWER_KEY
from gateway.server.body_cycle import HIGH_WATER_BYTES, PiecesCycle


class Flow:
    write_paused = False

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
        scope=scope,
        transport=Transport(),  # type: ignore[arg-type]
        flow=flow,  # type: ignore[arg-type]
        logger=logging.getLogger("t"),
        access_logger=logging.getLogger("t"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )
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


class WritingTransport(Transport):
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


def answerable() -> PiecesCycle:
    """A cycle as the protocol adopts it: its scope offers its ``answer``."""
    scope: Any = {"type": "http", "method": "POST", "path": "/"}
    raw = RequestResponseCycle(
        scope=scope,
        transport=WritingTransport(),  # type: ignore[arg-type]
        flow=Flow(),  # type: ignore[arg-type]
        logger=logging.getLogger("t"),
        access_logger=logging.getLogger("t"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )
    adopted = PiecesCycle.adopt(raw)
    adopted.scope[ANSWER_KEY] = adopted.answer  # type: ignore[literal-required]
    return adopted


async def test_a_finished_cycle_is_freed_without_the_cyclic_collector() -> None:
    """The scope's ``answer`` refers to its cycle: kept after the answer, every finished
    request (its body's chunks included) would wait for a full collection, which the
    gateway's collector settings make rare. A 6 MB image each, seen as RSS that never
    came back after a burst."""
    gc.disable()
    try:
        by_answer, by_send, lost = answerable(), answerable(), answerable()
        by_answer.add(b"x" * 1024)
        assert by_answer.answer(200, b"", b"{}")
        await by_send.send({"type": "http.response.start", "status": 200, "headers": []})
        await by_send.send({"type": "http.response.body", "body": b"{}"})
        lost.forget()  # what the protocol's connection_lost does for its current cycle
        refs = [weakref.ref(c) for c in (by_answer, by_send, lost)]
        del by_answer, by_send, lost
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()


async def test_a_cycle_still_offering_its_answer_is_a_cycle_until_forgotten() -> None:
    gc.disable()
    try:
        waiting = answerable()
        kept = weakref.ref(waiting)
        del waiting
        assert kept() is not None  # the cycle `forget` breaks is real
    finally:
        gc.enable()
        gc.collect()

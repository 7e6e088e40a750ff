"""The stream door on a fake unary door: answers as they complete, a bounded number in flight,
errors as stream messages, and a cancelled stream cancels what it was serving."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from gateway.grpc_door.infer import GrpcAnswer
from gateway.grpc_door.receive import MessageReader
from gateway.grpc_door.stream import StreamDoor
from gateway.memory.inflight_bytes import Hold, InflightBytes
from v2proto.grpc import grpc_service_pb2 as pb


class Door:
    """Answers ``b"<id>:<seconds>"`` after that long; ``b"<id>:bad"`` is refused."""

    def __init__(self) -> None:
        self.reader = MessageReader(InflightBytes(64 << 20, 0.0), 1 << 20, 5.0)
        self.in_flight = 0
        self.most = 0
        self.cancelled = 0

    async def answer(
        self, data: bytes, metadata: Any, time_remaining: Any, hold: Hold
    ) -> GrpcAnswer:
        self.reader.release(hold)  # as the edge does once the answer is made
        request_id, _, what = data.decode().partition(":")
        if what == "bad":
            return GrpcAnswer(None, grpc.StatusCode.NOT_FOUND, "unknown model 'x'", (), request_id)
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            await asyncio.sleep(float(what))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        response = pb.ModelInferResponse(id=request_id, model_name="m")
        return GrpcAnswer(response, grpc.StatusCode.OK, "", (), request_id)


class Context:
    """The stream's context: its messages read one at a time from ``requests``."""

    def __init__(self, requests: AsyncIterator[bytes]) -> None:
        self._requests = requests

    async def read(self) -> Any:
        try:
            return await anext(self._requests)
        except StopAsyncIteration:
            return grpc.aio.EOF

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def time_remaining(self) -> float | None:
        return None


async def messages(*items: bytes, then: asyncio.Event | None = None) -> AsyncIterator[bytes]:
    for item in items:
        yield item
    if then is not None:
        await then.wait()  # the client keeps its side open


async def collect(door: StreamDoor, requests: AsyncIterator[bytes]) -> list[tuple[str, str]]:
    out = []
    async for response in door(requests, Context(requests)):  # type: ignore[arg-type]
        out.append((response.infer_response.id, response.error_message))
    return out


async def test_answers_come_as_they_complete_and_a_refusal_does_not_end_the_stream() -> None:
    door = StreamDoor(Door())  # type: ignore[arg-type]
    got = await collect(door, messages(b"slow:0.2", b"fast:0", b"gone:bad", b"mid:0.05"))
    assert sorted(got[:2]) == [("fast", ""), ("gone", "unknown model 'x'")]
    assert got[2:] == [("mid", ""), ("slow", "")]


async def test_at_most_in_flight_requests_are_served_at_once() -> None:
    fake = Door()
    door = StreamDoor(fake, in_flight=3)  # type: ignore[arg-type]
    got = await collect(door, messages(*(b"r%d:0.01" % i for i in range(12))))
    assert len(got) == 12 and fake.most == 3


async def test_a_cancelled_stream_cancels_the_requests_it_was_serving() -> None:
    fake = Door()
    door = StreamDoor(fake)  # type: ignore[arg-type]
    open_side = asyncio.Event()
    first: list[tuple[str, str]] = []

    async def consume() -> None:
        requests = messages(b"a:0", b"b:30", b"c:30", then=open_side)
        async for response in door(requests, Context(requests)):  # type: ignore[arg-type]
            first.append((response.infer_response.id, response.error_message))

    task = asyncio.create_task(consume())
    for _ in range(200):
        if first and fake.in_flight == 2:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert first == [("a", "")] and fake.cancelled == 2 and fake.in_flight == 0


async def test_a_client_that_stops_reading_answers_stops_its_own_requests() -> None:
    """Answers handed out but not yet taken hold their slots: the door reads no request past
    ``in_flight`` while they wait."""
    fake = Door()
    door = StreamDoor(fake, in_flight=3)  # type: ignore[arg-type]
    read = 0

    async def requests() -> AsyncIterator[bytes]:
        nonlocal read
        for i in range(50):
            read += 1
            yield b"r%d:0" % i

    source = requests()
    answers = door(source, Context(source))  # type: ignore[arg-type]
    await anext(answers)  # one answer taken, then the client reads no more
    for _ in range(50):
        await asyncio.sleep(0)
    assert read <= 3 + 1, read  # the slots' requests, and the taken answer's successor
    rest = [response async for response in answers]
    assert len(rest) == 49 and read == 50

"""The edge holds a request's bytes within the in-flight bytes from its head to its written
answer: what the body has sent plus one read, never what it declared."""

from __future__ import annotations

import asyncio

import pytest

from gateway.call import InferAnswer, InferCall
from gateway.errors import Overloaded
from gateway.memory.inflight_bytes import READ_BYTES, SMALL_BYTES, InflightBytes
from gateway.pipeline.build import build_edge
from gateway.pipeline.edge import Arrival
from gateway.telemetry.tracing import Tracer
from tests.gateway.pipeline.test_edge import BODY, REPLY, Door, Setup

MIB = 1 << 20


def budgeted(
    limit: int, max_body: int = 4096, wait_s: float = 0.0, setup: Setup | None = None
) -> tuple[Setup, InflightBytes]:
    setup, memory = setup or Setup(), InflightBytes(limit, wait_s=wait_s)
    setup.edge = build_edge(
        setup.pipeline,
        setup.clock,
        Tracer(),
        setup.observe,
        tenant_of=setup.tenant_of,
        model_of=setup.model_of,
        tenants=setup.limits,
        max_body_bytes=max_body,
        parser=setup.parser,
        schema_of=lambda name: setup.schema,
        memory=memory,
    )
    return setup, memory


class SlowDoor:
    """A client that declares ``declared`` bytes and sends the chunks put in ``chunks``."""

    def __init__(self, declared: int) -> None:
        self.headers = {"content-length": str(declared)}
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.declared = declared
        self.sent = 0

    async def read(self) -> tuple[bytes, bool]:
        chunk = await self.chunks.get()
        self.sent += len(chunk)
        return chunk, self.sent < self.declared


async def test_a_request_holds_its_body_and_answer_until_done_then_gives_them_back() -> None:
    setup, memory = budgeted(1 << 20)
    door = Door(content_length=str(len(BODY)))
    arrival = setup.arrive(door)
    result = await setup.edge.infer(arrival, door.read)
    assert memory.held == arrival.held == len(BODY) + len(result.body)
    setup.edge.done(arrival, 200, "r0", None, len(result.body))
    assert memory.held == 0 and memory.peak == len(BODY) + len(result.body)


async def test_an_undeclared_body_is_counted_once_read() -> None:
    setup, memory = budgeted(1 << 20)
    door = Door(BODY[:10], BODY[10:])  # chunked: no Content-Length
    arrival = setup.arrive(door)
    result = await setup.edge.infer(arrival, door.read)
    assert arrival.held == len(BODY) + len(result.body) and result.body != REPLY  # renamed
    setup.edge.done(arrival, 200)
    assert memory.held == 0


async def test_a_body_that_does_not_fit_is_refused_with_503_before_it_is_read() -> None:
    setup, memory = budgeted(len(BODY) + 10)
    memory.add(20)  # another request's answer being written
    door = Door(content_length=str(len(BODY)))
    arrival, error = await setup.refused(door)
    assert isinstance(error, Overloaded) and error.headers()["retry-after"] == "1"
    assert door.reads == 0 and not setup.calls
    assert memory.held == 20 and arrival.held == 0


async def test_a_crash_in_the_pipeline_gives_the_bytes_back_though_no_done_follows() -> None:
    setup, memory = budgeted(1 << 20)

    async def crash(call: object) -> object:
        raise RuntimeError("a bug")

    setup.edge._pipeline = crash  # type: ignore[assignment]
    door = Door(content_length=str(len(BODY)))
    arrival = setup.arrive(door)
    with pytest.raises(RuntimeError):
        await setup.edge.infer(arrival, door.read)
    assert memory.held == 0 and arrival.held == 0


async def test_a_body_that_declares_much_and_sends_nothing_holds_one_read() -> None:
    setup, memory = budgeted(64 * MIB, max_body=16 * MIB)
    door = SlowDoor(16 * MIB)
    arrival = setup.edge.arrive("digits", None, door.headers, "127.0.0.2")
    task = asyncio.create_task(setup.edge.infer(arrival, door.read))
    await asyncio.sleep(0)
    assert memory.held == arrival.held == READ_BYTES  # not the 16 MiB it declared
    assert arrival.account is not None and arrival.account.key == "127.0.0.2"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert memory.held == 0 and not len(memory.peers)


async def test_a_body_holds_what_arrived_plus_one_read_as_it_arrives() -> None:
    setup, memory = budgeted(64 * MIB, max_body=16 * MIB)
    door = SlowDoor(MIB)
    arrival = setup.edge.arrive("digits", None, door.headers, "127.0.0.2")
    task = asyncio.create_task(setup.edge.infer(arrival, door.read))
    for sent in (100_000, 200_000, 300_000):
        door.chunks.put_nowait(b" " * 100_000)
        await asyncio.sleep(0)
        assert arrival.held == sent + READ_BYTES == memory.held
    door.chunks.put_nowait(b" " * (MIB - 300_000 - 100))
    await asyncio.sleep(0)
    assert arrival.held == MIB  # never more than it declared
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert memory.held == 0


async def test_a_body_whose_next_read_finds_no_room_is_refused_with_503() -> None:
    setup, memory = budgeted(READ_BYTES + 150_000, max_body=16 * MIB)
    door = SlowDoor(MIB)
    arrival = setup.edge.arrive("digits", None, door.headers, "127.0.0.2")
    task = asyncio.create_task(setup.edge.infer(arrival, door.read))
    await asyncio.sleep(0)
    memory.add(100_000)  # another request's bytes, meanwhile
    door.chunks.put_nowait(b" " * 100_000)
    with pytest.raises(Overloaded):
        await task
    assert door.chunks.empty() and door.sent == 100_000  # no read after the refusal
    setup.edge.done(arrival, 503)
    assert memory.held == 100_000


async def test_an_answer_not_yet_written_holds_its_bytes_until_the_door_says_so() -> None:
    setup, memory = budgeted(1 << 20)
    door = Door(content_length=str(len(BODY)))
    arrival = setup.arrive(door)
    result = await setup.edge.infer(arrival, door.read)
    setup.edge.done(arrival, 200, "r0", None, len(result.body), written=False)
    assert memory.held == arrival.held == len(result.body)  # the body's bytes went back
    setup.edge.written(arrival)
    assert memory.held == arrival.held == 0
    setup.edge.written(arrival)  # once only
    assert memory.held == 0


class Replying(Setup):
    """A pipeline whose transport reads a reply body of ``reply_bytes``: it asks the call's
    room first, as the HTTP/1.1 connection does."""

    reply_bytes = 300_000

    def __init__(self) -> None:
        super().__init__()
        self.held_while_read = 0

    async def pipeline(self, call: InferCall) -> InferAnswer:
        room = call.room
        assert room is not None and room.answer_free == SMALL_BYTES
        assert room.hold_answer(self.reply_bytes)
        assert isinstance(room, Arrival)
        self.held_while_read = room.held
        return await super().pipeline(call)


async def test_a_reply_body_is_held_before_it_is_read_then_as_the_answer_written() -> None:
    setup, memory = budgeted(1 << 20, setup=Replying())
    door = Door(content_length=str(len(BODY)))
    arrival = setup.arrive(door)
    result = await setup.edge.infer(arrival, door.read)
    assert isinstance(setup, Replying)
    assert setup.held_while_read == len(BODY) + setup.reply_bytes
    # the answer as the door writes it, in place of the room its reply was given
    assert memory.held == arrival.held == len(BODY) + len(result.body)
    assert arrival.answer_held == len(result.body)
    setup.edge.done(arrival, 200, "r0", None, len(result.body))
    assert memory.held == 0
    # a try that outlived its request holds nothing: nothing would give it back
    assert arrival.hold_answer(1 << 19)
    await arrival.wait_answer(1 << 19)
    assert memory.held == arrival.held == 0

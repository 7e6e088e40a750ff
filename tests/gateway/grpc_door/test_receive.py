"""Reading a gRPC call's message under the in-flight bytes and the body timeout
(`gateway.grpc_door.receive`), on a fake context: what is held when, what a refusal says."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from gateway.grpc_door.receive import CallRefused, MessageReader
from gateway.memory.inflight_bytes import InflightBytes

MIB = 1 << 20


class Context:
    """A call from ``address`` whose message arrives when ``arrive`` is set (``None``: the side
    ends)."""

    def __init__(self, message: bytes | None, address: str = "127.0.0.1") -> None:
        self.message = message
        self.arrive = asyncio.Event()
        self.reads = 0
        self.address = address

    def peer(self) -> str:
        return f"ipv4:{self.address}:50000"

    async def read(self) -> Any:
        self.reads += 1
        await self.arrive.wait()
        return grpc.aio.EOF if self.message is None else self.message


async def test_a_message_is_read_only_under_twice_the_most_it_may_be_then_holds_its_size() -> None:
    memory = InflightBytes(64 * MIB, 0.0)
    reader = MessageReader(memory, 16 * MIB, 5.0)
    context = Context(b"x" * 1000)
    task = asyncio.create_task(reader.read(context))
    await asyncio.sleep(0)
    assert memory.held == 32 * MIB and context.reads == 1  # before grpc takes any of it in
    context.arrive.set()
    received = await task
    assert received is not None and received.hold.held == 1000 == memory.held
    reader.release(received.hold)
    assert memory.held == 0 and not len(memory.peers)


async def test_a_message_that_does_not_fit_is_refused_unread_with_resource_exhausted() -> None:
    memory = InflightBytes(64 * MIB, 0.0)
    reader = MessageReader(memory, 16 * MIB, 5.0)
    memory.add(40 * MIB)  # others' bytes in flight
    context = Context(b"x")
    with pytest.raises(CallRefused) as refused:
        await reader.read(context)
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "inflight_bytes" in refused.value.message
    assert dict(refused.value.metadata) == {"x-http-status": "503", "retry-after": "1"}
    assert context.reads == 0 and memory.held == 40 * MIB


async def test_a_message_not_complete_in_time_is_refused_and_its_bytes_given_back() -> None:
    memory = InflightBytes(64 * MIB, 0.0)
    reader = MessageReader(memory, 16 * MIB, 0.05)
    with pytest.raises(CallRefused) as refused:
        await reader.read(Context(b"never"))
    assert refused.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert "body_timeout_s" in refused.value.message
    assert dict(refused.value.metadata) == {"x-http-status": "408"}
    assert memory.held == 0


async def test_a_side_that_ends_between_messages_reads_none_and_holds_nothing() -> None:
    memory = InflightBytes(64 * MIB, 0.0)
    context = Context(None)
    context.arrive.set()
    assert await MessageReader(memory, 16 * MIB, 5.0).read(context) is None
    assert memory.held == 0


async def test_a_cancelled_read_gives_its_bytes_back() -> None:
    memory = InflightBytes(64 * MIB, 0.0)
    task = asyncio.create_task(MessageReader(memory, 16 * MIB, 5.0).read(Context(b"x")))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert memory.held == 0


async def test_a_read_lent_room_is_taken_back_for_another_address_that_waits() -> None:
    memory = InflightBytes(64 * MIB, 5.0, peer_share=0.25, peer_floor=2 * MIB)
    reader = MessageReader(memory, MIB, 5.0)  # each read is lent 2 MiB
    idle = [Context(b"never", "127.0.0.2") for _ in range(32)]  # headers only: 64 MiB lent
    tasks = [asyncio.create_task(reader.read(context)) for context in idle]
    await asyncio.sleep(0)
    assert memory.held == 64 * MIB and all(context.reads == 1 for context in idle)
    other = Context(b"x" * 1000)  # another address: it waits, and the oldest loan goes back
    arrived = asyncio.create_task(reader.read(other))
    await asyncio.sleep(0.01)
    assert other.reads == 1 and memory.reclaimed == 1
    other.arrive.set()
    received = await arrived
    assert received is not None and received.hold.held == 1000
    with pytest.raises(CallRefused) as refused:
        await tasks[0]
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(refused.value.metadata) == {"x-http-status": "503", "retry-after": "1"}
    assert "another client" in refused.value.message
    for task in tasks[1:]:
        task.cancel()
    await asyncio.gather(*tasks[1:], return_exceptions=True)
    reader.release(received.hold)
    assert memory.held == 0 and not len(memory.peers)


async def test_a_read_lent_room_of_an_address_within_its_share_is_kept() -> None:
    memory = InflightBytes(8 * MIB, 0.05, peer_share=0.5, peer_floor=2 * MIB)
    reader = MessageReader(memory, MIB, 5.0)
    first = [Context(b"never", "127.0.0.2") for _ in range(2)]  # 4 MiB: its share
    second = [Context(b"never", "127.0.0.3") for _ in range(2)]
    tasks = [asyncio.create_task(reader.read(context)) for context in first + second]
    await asyncio.sleep(0)
    assert memory.held == 8 * MIB
    with pytest.raises(CallRefused) as refused:  # nobody is over its share: nothing to take back
        await reader.read(Context(b"x"))
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED and memory.reclaimed == 0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert memory.held == 0

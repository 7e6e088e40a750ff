"""A gRPC call whose caller stops waiting is cancelled in gRPC's core, not by its task.

grpc.aio leaks a batch's native operations when the task awaiting the batch is cancelled
(``call.cancel()`` does that), so the call is cancelled in the core only: the replica sees the
cancellation, the batch ends with the status CANCELLED, and its task sees it end. Until then the
call is held. (A real server seeing the cancellation: tests/gateway/upstream/transport/
test_grpc_client.py.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.upstream.transport import grpc_client
from gateway.upstream.transport.grpc_client import CANCELLED_DETAILS, _Call


class Core:
    """What the call's core object offers: done, and a cancel that ends the batch."""

    def __init__(self, batch: asyncio.Event) -> None:
        self.batch = batch
        self.cancelled_with: list[str] = []

    def done(self) -> bool:
        return self.batch.is_set()

    def cancel(self, details: str) -> None:
        self.cancelled_with.append(details)
        self.batch.set()  # the core ends the batch: its task sees it


class Rpc:
    """A stand-in for a grpc.aio unary call: awaitable, with its core object."""

    def __init__(self, seen: list[str]) -> None:
        self._cython_call = Core(asyncio.Event())
        self._seen = seen

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> str:
        try:
            await self._cython_call.batch.wait()
        except asyncio.CancelledError:
            self._seen.append("task cancelled")  # the leak's path
            raise
        self._seen.append("batch ended")
        return "reply"


async def test_a_caller_cancelled_cancels_the_rpc_in_the_core_and_holds_it_until_it_ends() -> None:
    seen: list[str] = []
    rpcs: list[Rpc] = []

    def method(message: Any, *, timeout: float, metadata: Any) -> Rpc:
        rpcs.append(Rpc(seen))
        return rpcs[-1]

    call = _Call(channel=None, metadata=(), timeout=60.0, raw=True)  # type: ignore[arg-type]
    caller = asyncio.ensure_future(call(method, "request"))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert rpcs[0]._cython_call.cancelled_with == [CANCELLED_DETAILS]
    assert len(grpc_client._UNFINISHED) == 1  # held until its batch has ended
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == ["batch ended"]  # its task saw the batch end: it was never cancelled
    assert not grpc_client._UNFINISHED


async def test_a_caller_that_waits_gets_the_reply() -> None:
    async def rpc(message: Any, *, timeout: float, metadata: Any) -> str:
        return f"reply to {message} within {timeout}"

    call = _Call(channel=None, metadata=(), timeout=2.0, raw=True)  # type: ignore[arg-type]
    assert await call(rpc, "x") == "reply to x within 2.0"

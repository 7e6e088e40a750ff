"""A gRPC call whose caller stops waiting is not cancelled: it ends by its own deadline.

grpc.aio leaks a batch's native operations when the task awaiting the batch is cancelled, so a
vote leg dropped past its quorum must leave its RPC to finish; it is held until it does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.upstream.transport import grpc_client
from gateway.upstream.transport.grpc_client import _Call


async def test_a_caller_cancelled_leaves_the_rpc_running_until_it_ends() -> None:
    release = asyncio.Event()
    seen: list[str] = []

    async def rpc(message: Any, *, timeout: float, metadata: Any) -> str:
        try:
            await release.wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        seen.append("ended")
        return "reply"

    call = _Call(channel=None, metadata=(), timeout=1.0, raw=True)  # type: ignore[arg-type]
    caller = asyncio.ensure_future(call(rpc, "request"))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert len(grpc_client._UNFINISHED) == 1  # held, not dropped
    release.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == ["ended"]
    assert not grpc_client._UNFINISHED


async def test_a_caller_that_waits_gets_the_reply() -> None:
    async def rpc(message: Any, *, timeout: float, metadata: Any) -> str:
        return f"reply to {message} within {timeout}"

    call = _Call(channel=None, metadata=(), timeout=2.0, raw=True)  # type: ignore[arg-type]
    assert await call(rpc, "x") == "reply to x within 2.0"

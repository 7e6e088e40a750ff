"""At most ``server.max_connections_per_peer`` connections with calls in flight per client address.

grpc does not show a server its connections, only each call's peer (``ipv4:10.0.0.7:5000``):
the address and the client's port, which names one connection. So the cap counts, for each
address, the connections that have a call in flight: a call on a connection its address is
not yet counted for, while the address already has that many, is answered
RESOURCE_EXHAUSTED at once, before its message is read. A connection that sends no call is
held in bounds by the door's cap on connections (``server.max_connections``), its preface
timeout and grpc's idle limit (``server.grpc``), not here. The REST door counts its
connections themselves (`gateway.worker.http.connections`).

`capped` and `capped_stream` wrap a method's behaviour; a door without a cap does not wrap
(nothing to pay).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc

from gateway.memory.peer_share import peer_host

Context = grpc.aio.ServicerContext[Any, Any]
R = TypeVar("R")
Q = TypeVar("Q")


class PeerConnections:
    """The connections with calls in flight, by client address."""

    def __init__(self, max_per_peer: int) -> None:
        self.max_per_peer = max_per_peer
        # address -> {peer (one connection): its calls in flight}
        self._by_address: dict[str, Counter[str]] = {}

    def enter(self, peer: str) -> bool:
        """One call on ``peer``'s connection counted in; False (not counted) if its address
        already has its most connections and this is another one."""
        address = peer_host(peer)
        calls = self._by_address.get(address)
        if calls is None:
            calls = self._by_address[address] = Counter()
        elif peer not in calls and len(calls) >= self.max_per_peer:
            return False
        calls[peer] += 1
        return True

    def leave(self, peer: str) -> None:
        address = peer_host(peer)
        calls = self._by_address[address]
        calls[peer] -= 1
        if not calls[peer]:
            del calls[peer]
            if not calls:
                del self._by_address[address]

    def connections(self, address: str) -> int:
        """``address``'s connections with calls in flight."""
        return len(self._by_address.get(address, ()))

    def refusal(self, peer: str) -> str:
        return (
            f"too many connections from {peer_host(peer)} "
            f"(at most {self.max_per_peer}: server.max_connections_per_peer)"
        )


def capped(
    behavior: Callable[[Q, Context], Awaitable[R]], connections: PeerConnections
) -> Callable[[Q, Context], Awaitable[R]]:
    """A method answering one message (unary or client-streaming), under the cap."""

    async def call(request: Q, context: Context) -> R:
        peer = context.peer()
        if not connections.enter(peer):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, connections.refusal(peer))
        try:
            return await behavior(request, context)
        finally:
            connections.leave(peer)

    return call


def capped_stream(
    behavior: Callable[[Q, Context], AsyncIterator[R]], connections: PeerConnections
) -> Callable[[Q, Context], AsyncIterator[R]]:
    """A method answering a stream (an async generator), under the cap."""

    async def call(request: Q, context: Context) -> AsyncIterator[R]:
        peer = context.peer()
        if not connections.enter(peer):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, connections.refusal(peer))
        try:
            async for answer in behavior(request, context):
                yield answer
        finally:
            connections.leave(peer)

    return call

"""One request message of a gRPC call, read under the door's memory bound and body timeout.

grpc reads a message whole before a handler sees it, and opens the stream's HTTP/2 window to
the message's declared length only once the handler asks for it; until then a stream may send
no more than its window (``server.grpc.stream_window_bytes``). So the door asks for a message
only once it holds, in the gateway-wide budget (``server.inflight_bytes``), twice the most
that message may be (``server.max_body_bytes``, grpc's own receive limit): while grpc hands a
message over it holds it more than once (the pieces received, one buffer of them, the bytes
object made of that), so what grpc buffers of messages being read is within the budget, as
REST's bodies are. A call whose bytes do not fit within ``server.inflight_wait_s`` is refused
with RESOURCE_EXHAUSTED (``x-http-status: 503``, ``retry-after``) before any of its message
is taken in; once read, the message holds its own size and the rest goes back. The price: a
call whose message is slow to come holds that much of the budget until it comes or the body
timeout cuts it, as a REST body declared that large does; a gateway of small requests may
lower ``server.max_body_bytes``.

A message not complete ``server.body_timeout_s`` after it was asked for is refused as REST's
slow body is (408, DEADLINE_EXCEEDED) and grpc resets the stream; so is a stream that stays
idle that long between requests. A call whose client side ends with no message, or inside one
(a cut 5-byte header), is answered INTERNAL ("missing request"), as gRPC servers answer a unary
call without its request.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from gateway.errors import Overloaded
from gateway.policies.byte_budget import InflightBytes


class Readable(Protocol):
    """What a message is read from: a call's `grpc.aio.ServicerContext`."""

    async def read(self) -> Any: ...


SLOW_BODY = 408  # REST's status for a body not complete in time
READ_COPIES = 2  # a message being handed over by grpc, in the most bytes it may be
MEMORY_REFUSED = 503


class Refused(Exception):
    """A call refused before its message was read: the code, details and trailing metadata."""

    def __init__(
        self, code: grpc.StatusCode, message: str, metadata: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.metadata = code, message, metadata


@dataclass(frozen=True, slots=True)
class Received:
    data: bytes
    held: int  # bytes it holds in the budget: the caller gives them back (the edge, at `done`)


class MessageReader:
    """Reads a call's messages one at a time, each under the budget and the timeout."""

    def __init__(self, memory: InflightBytes, max_message_bytes: int, timeout_s: float) -> None:
        self._memory = memory
        self._reserve = READ_COPIES * max_message_bytes
        self.timeout_s = timeout_s

    async def read(self, context: Readable) -> Received | None:
        """The next message (None: the client's side ended between messages); `Refused` if it
        does not fit, is not complete in time, or the side ended inside one."""
        memory, reserve = self._memory, self._reserve
        try:
            await memory.take(reserve)
        except Overloaded as exc:
            metadata = (("x-http-status", str(MEMORY_REFUSED)), *exc.headers().items())
            raise Refused(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message, metadata) from None
        try:
            async with asyncio.timeout(self.timeout_s):  # no task of its own, unlike wait_for
                data = await context.read()
        except TimeoutError:
            memory.give(reserve)
            raise Refused(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no complete request message within {self.timeout_s:g} s (server.body_timeout_s)",
                (("x-http-status", str(SLOW_BODY)),),
            ) from None
        except BaseException:
            memory.give(reserve)
            raise
        if data is grpc.aio.EOF or not isinstance(data, bytes):
            memory.give(reserve)
            return None
        size = len(data)
        if reserve > size:
            memory.give(reserve - size)
        elif size > reserve:  # not past grpc's own limit; counted all the same
            memory.add(size - reserve)
        return Received(data, size)

    def release(self, held: int) -> None:
        """Gives back a message's bytes that nobody else will (it was refused unread)."""
        if held:
            self._memory.give(held)


def missing_request() -> Refused:
    """A unary call whose client side ended with no (complete) message."""
    return Refused(
        grpc.StatusCode.INTERNAL,
        "missing request: the call ended without a complete request message",
        (("x-http-status", "400"),),
    )

"""One request message of a gRPC call, read under the door's memory bound and body timeout.

grpc reads a message whole before a handler sees it, and opens the stream's HTTP/2 window to
the message's declared length only once the handler asks for it; until then a stream may send
no more than its window (``server.grpc.stream_window_bytes``). So grpc's read is the door's one
read, and the door cannot charge its bytes as they arrive, as REST's body step does: grpc says
nothing of a message until it is whole. What it can charge is the room the read may fill: the
door asks for a message only once it holds, within the in-flight bytes (``server.inflight_bytes``),
twice the most that message may be (``server.max_body_bytes``, grpc's own receive limit: while
grpc hands a message over it holds it more than once, the pieces received, one buffer of them,
the bytes object made of that), so what grpc buffers of messages being read is within the
budget, as REST's bodies are. That room is lent, not held: it counts as a large request of the
call's address (``context.peer()``), and when another address has to wait for room, the oldest
loan of the address most over its share is taken back (`gateway.memory.inflight_bytes`): its
read is refused with RESOURCE_EXHAUSTED (``x-http-status: 503``, ``retry-after``) and grpc
drops what it had of the message. So calls that send only their headers hold the budget only
while nobody else needs it. Once read, the message holds its own size and the rest goes back.
A call whose room does not come within ``server.inflight_wait_s`` is refused the same way
before any of its message is taken in.

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
from gateway.memory.inflight_bytes import Hold, InflightBytes


class Readable(Protocol):
    """What a message is read from: a call's `grpc.aio.ServicerContext`."""

    async def read(self) -> Any: ...

    def peer(self) -> str: ...


# REST's status for a body not complete in time
SLOW_BODY = 408
# a message being handed over by grpc, in the most bytes it may be
READ_COPIES = 2
MEMORY_REFUSED = 503


class CallRefused(Exception):
    """A call refused before its message was read: the code, details and trailing metadata."""

    def __init__(
        self, code: grpc.StatusCode, message: str, metadata: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.code, self.message, self.metadata = code, message, metadata


@dataclass(frozen=True, slots=True)
class Received:
    data: bytes
    # its bytes in the budget: the caller gives them back (the edge, at `done`)
    hold: Hold


class _Read(Hold):
    """A message being read: its hold, and the timeout of its read, which a reclaim of the
    read's room cuts short."""

    __slots__ = ("reclaimed", "timeout")

    def __init__(self, peer: str) -> None:
        # as `Hold`'s, without the call
        self.peer = peer
        self.held = 0
        self.account = None
        # set as the read begins
        self.timeout: asyncio.Timeout | None = None
        self.reclaimed = False

    def reclaim(self) -> None:
        """Another address needs the room lent to this read: the read ends now, refused."""
        self.reclaimed = True
        timeout = self.timeout
        if timeout is not None and not timeout.expired():
            # else it is ending anyway
            # in the past: at once
            timeout.reschedule(0)


class MessageReader:
    """Reads a call's messages one at a time, each under the budget and the timeout."""

    def __init__(self, memory: InflightBytes, max_message_bytes: int, timeout_s: float) -> None:
        self._memory = memory
        self._reserve = READ_COPIES * max_message_bytes
        self.timeout_s = timeout_s

    async def read(self, context: Readable) -> Received | None:
        """The next message (None: the client's side ended between messages); `CallRefused` if it
        does not fit, is not complete in time, its room is taken back, or the side ended
        inside one."""
        memory, reserve = self._memory, self._reserve
        hold = _Read(context.peer())
        if not memory.hold(hold, reserve, hold.reclaim):
            try:
                await memory.wait(hold, reserve, hold.reclaim)
            except Overloaded as exc:
                memory.release(hold)
                raise _memory_refused(exc.message, exc) from None
            except BaseException:
                memory.release(hold)
                raise
        try:
            async with (timeout := asyncio.timeout(self.timeout_s)):
                # no task, unlike wait_for
                hold.timeout = timeout
                if hold.reclaimed:
                    # taken back before its read began
                    raise TimeoutError
                data = await context.read()
        except TimeoutError:
            memory.release(hold)
            if hold.reclaimed:
                raise _memory_refused(
                    "the call's message had not come when another client needed its room in "
                    f"server.inflight_bytes={memory.limit}",
                    None,
                ) from None
            raise CallRefused(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no complete request message within {self.timeout_s:g} s (server.body_timeout_s)",
                (("x-http-status", str(SLOW_BODY)),),
            ) from None
        except BaseException:
            memory.release(hold)
            raise
        if data is grpc.aio.EOF or not isinstance(data, bytes):
            memory.release(hold)
            return None
        # not past grpc's own limit; counted all the same
        memory.settle(hold, len(data))
        return Received(data, hold)

    def release(self, hold: Hold) -> None:
        """Gives back a message's bytes that nobody else will (it was refused unread)."""
        self._memory.release(hold)


def _memory_refused(message: str, error: Overloaded | None) -> CallRefused:
    retry = error.headers() if error is not None else {"retry-after": "1"}
    metadata = (("x-http-status", str(MEMORY_REFUSED)), *retry.items())
    return CallRefused(grpc.StatusCode.RESOURCE_EXHAUSTED, message, metadata)


def missing_request() -> CallRefused:
    """A unary call whose client side ended with no (complete) message."""
    return CallRefused(
        grpc.StatusCode.INTERNAL,
        "missing request: the call ended without a complete request message",
        (("x-http-status", "400"),),
    )

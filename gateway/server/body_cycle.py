"""A request's body handed to the app as the chunks it arrived in, not grown and copied twice.

uvicorn's response cycle appends every body chunk to a bytearray (one copy, plus the copies of its
growth) and hands it over as ``bytes(body)`` (another copy), and pauses reading each time its
high-water mark waits: an image was copied twice more than the socket read did and took many
pause/resume round trips (docs/measured.md, The data path). Here the parser's chunks are kept as
they are (`PiecesCycle`, which the protocol swaps in for uvicorn's cycle) and ``receive`` hands
them over one at a time, with ``more_body`` true while any are left or more are coming; the app
(the edge keeps a body as pieces: `gateway.v2.body`) never sees a join. Reading pauses while
`HIGH_WATER_BYTES` wait unread and resumes once the app has taken them, so a client that sends
faster than the app reads holds at most that much of this connection's memory besides what the app
holds.

The gateway's own answers skip uvicorn's ``send`` (`PiecesCycle.answer`, offered to the app in
the scope under `gateway.api.responses.ANSWER_KEY`): their header lines were built by the gateway
from values it made or checked, so uvicorn's per-header regex validation and lower-casing would
only re-check what cannot be wrong; the status line, the server's default headers (``date``),
``content-length`` and ``connection: close`` are added as uvicorn adds them, and the cycle ends as
uvicorn's does. Anything else the app sends goes through uvicorn's ``send``, validated.

Once the last chunk has been handed over, ``receive`` waits for the disconnect (or the
response's end), as uvicorn's does: an app listening for a disconnect does not spin.

When the connection is lost before the answer, the cycle calls the hook the app left in its
scope (`gateway.api.infer.CLIENT_LEFT_KEY`: the infer handler's, which cancels the request),
taking it: `lost`. uvicorn itself only marks the cycle disconnected, which an app that no longer
reads its body never sees.
"""

from __future__ import annotations

from collections import deque

from uvicorn._types import ASGIReceiveEvent, ASGISendEvent
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from gateway.api.infer import CLIENT_LEFT_KEY
from gateway.api.responses import ANSWER_KEY

HIGH_WATER_BYTES = 256 * 1024  # one socket read's worth (uvloop's read size)
_DISCONNECT: ASGIReceiveEvent = {"type": "http.disconnect"}
_CLOSE = b"connection: close\r\n"


class _DefaultLines:
    """The server's default headers (``date``, refreshed each second by uvicorn, which then
    hands every cycle a new list) as header lines, encoded once per list."""

    source: object = None
    lines: bytes = b""

    @classmethod
    def of(cls, headers: list[tuple[bytes, bytes]]) -> bytes:
        if headers is not cls.source:
            cls.lines = b"".join(b"%s: %s\r\n" % (name.lower(), value) for name, value in headers)
            cls.source = headers
        return cls.lines


class PiecesCycle(RequestResponseCycle):
    """uvicorn's cycle with the body as a queue of chunks; set as a cycle's class when the
    request's head is complete (`adopt`), before its app runs or any body chunk arrives."""

    pieces: deque[bytes]
    waiting: int  # bytes in ``pieces``
    ended: bool  # the last chunk was handed over

    @classmethod
    def adopt(cls, cycle: RequestResponseCycle) -> PiecesCycle:
        cycle.__class__ = cls
        assert isinstance(cycle, PiecesCycle)  # for the type checker: the line above made it so
        cycle.pieces = deque()
        cycle.waiting = 0
        cycle.ended = False
        return cycle

    def add(self, chunk: bytes) -> None:
        """The parser read ``chunk`` of the body (the protocol's ``on_body``)."""
        self.pieces.append(chunk)
        self.waiting += len(chunk)
        if self.waiting > HIGH_WATER_BYTES:
            self.flow.pause_reading()
        self.message_event.set()

    def answer(self, status: int, lines: bytes, body: bytes) -> bool:
        """Writes a whole answer: ``lines`` are header lines the gateway built (``name: value``
        and CRLF each; no content-length). False, writing nothing, where uvicorn's ``send``
        must do it (writing is paused, an access log is kept, the answer has begun)."""
        if self.response_started or self.flow.write_paused or self.access_log:
            return False
        self.response_started = True
        self.waiting_for_100_continue = False
        self.scope.pop(ANSWER_KEY, None)  # type: ignore[misc]  # as `forget` does
        if self.disconnected:
            return True  # as uvicorn's send: nothing to write to
        close = b"" if self.keep_alive else _CLOSE
        head = b"%s%s%scontent-length: %d\r\n%s\r\n" % (
            STATUS_LINE[status], _DefaultLines.of(self.default_headers), lines, len(body), close
        )  # fmt: skip
        transport = self.transport
        transport.write(head)
        transport.write(body)
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            transport.close()
        self.on_response()
        return True

    async def send(self, message: ASGISendEvent) -> None:
        """uvicorn's; at the response's end the scope lets go of `answer` (see `forget`)."""
        await super().send(message)
        if self.response_complete:
            self.forget()

    def forget(self) -> None:
        """The scope's ``answer`` refers to this cycle, and this cycle to its scope: a
        reference cycle that only the cyclic collector frees, which the gateway's collector
        settings make rare, so every finished request kept its body until then (a large image
        each). Called once the answer is written or the connection is lost."""
        self.scope.pop(ANSWER_KEY, None)  # type: ignore[misc]

    def lost(self) -> None:
        """The connection is lost: the scope lets go of `answer` (`forget`), and before the
        answer is complete, the app's hook for a client that left is taken and called."""
        self.forget()
        if not self.response_complete:
            left = self.scope.pop(CLIENT_LEFT_KEY, None)  # type: ignore[misc]
            if left is not None:
                left()

    async def receive(self) -> ASGIReceiveEvent:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            if not self.pieces and (self.more_body or self.ended):
                self.flow.resume_reading()
                await self.message_event.wait()
            self.message_event.clear()
        if self.disconnected or self.response_complete:
            return _DISCONNECT
        body = b""
        if self.pieces:
            body = self.pieces.popleft()
            self.waiting -= len(body)
            if self.waiting <= HIGH_WATER_BYTES:
                self.flow.resume_reading()
        more = bool(self.pieces) or self.more_body
        self.ended = not more
        return {"type": "http.request", "body": body, "more_body": more}

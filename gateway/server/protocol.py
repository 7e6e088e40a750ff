"""uvicorn's httptools protocol with the client limits it lacks: head size and read timeouts.

uvicorn with httptools bounds neither the request head (httptools buffers a header of any
size) nor the time a client may take to send its head or body (connections trickling bytes
all stayed open; docs/measured.md). This subclass answers 431 once a request line
and headers pass ``max_header_bytes``, and 408 (closing the connection) when a head is not
complete ``header_timeout_s`` after the connection or the request's first byte, or a body
``body_timeout_s`` after its head. A timer is armed only when a read is left incomplete, so
a request that arrives whole costs the hot path a comparison, not a timer.

A connection lost before its answer tells the request's app (`PiecesCycle.lost`): the infer
handler then cancels the request, so a client that leaves stops its tries
(`gateway.pipeline.cancel`). The cycle told is the one whose app runs, which under pipelining
is not the last one parsed (uvicorn's ``cycle``).

A head with two ``Host`` fields is a 400 (RFC 9112 3.2: the Host guard and any proxy in
front could each read a different one), and so is an HTTP/1.1 head with none (RFC 9112 3.2:
a server MUST answer 400; HTTP/1.0 requests may omit it).

It also trims per-request costs of uvicorn's: a body reaches the app as the chunks it arrived
in, not grown in a bytearray and copied out (`gateway.server.body_cycle`); each answer's head
and body leave in one write(2) (writev(2) for a large body, which is not copied), not two; a
kept-alive connection keeps one lazily re-armed keep-alive timer instead of creating and
cancelling a loop timer per request (loadtests/bench_overhead.py).
"""

from __future__ import annotations

import asyncio
import enum
import http
from dataclasses import dataclass
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.api.infer import BODY_TIMEOUT_KEY
from gateway.api.responses import ANSWER_KEY
from gateway.server.body_cycle import PiecesCycle

# After an error answer the connection lingers (reading and dropping) so the client, still
# sending, can read the answer instead of a reset; bounded in time and bytes.
LINGER_S = 1.0
LINGER_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClientLimits:
    max_header_bytes: int = 32 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0


class _Reading(enum.Enum):
    NOTHING = enum.auto()  # between requests (uvicorn's keep-alive timeout applies)
    HEAD = enum.auto()
    BODY = enum.auto()


_NOTHING, _HEAD, _BODY = _Reading.NOTHING, _Reading.HEAD, _Reading.BODY


class _HeadTooLarge(Exception):
    pass


class _BadHead(Exception):
    """A head that parsed but that HTTP/1.1 forbids; its message is the 400's."""


_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"  # what uvicorn writes; never held back
_JOIN_BELOW = 16 * 1024  # a smaller body is copied after its head: cheaper than an iovec


class _OneWriteAnswer:
    """The transport as one request's response cycle sees it: the head waits for the body.

    uvicorn's cycle writes the status line and headers, then each body chunk; held here, the
    head leaves with the first chunk in one write(2). The cycle writes its first chunk even when
    it is empty (a 204, a zero-length body), so nothing waits beyond it; HEAD requests, whose
    answers write no body, are not wrapped. ``close`` sends a held head first, as uvicorn would
    have. The cycle uses only ``write``, ``close`` and ``is_closing``.
    """

    __slots__ = ("_answered", "_head", "_transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._head: bytes | None = None
        self._answered = False  # the head was written (or held)

    def write(self, data: bytes) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if len(data) < _JOIN_BELOW:
                self._transport.write(head + data)
            else:  # one vectored write (writev on uvloop): the body is not copied
                self._transport.writelines((head, data))
        elif self._answered or data == _CONTINUE:
            self._transport.write(data)
        else:
            self._answered = True
            self._head = data

    def close(self) -> None:
        if self._head is not None:
            self._transport.write(self._head)
            self._head = None
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[ClientLimits] = ClientLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading = _HEAD
        self._raw_head = 0  # bytes received since the head began: at least the head's size
        self._chunk = 0  # the size of the chunk being parsed, while no message ended in it
        self._head_too_large = False
        self._bad_head: str | None = None  # why a parsed head is refused (400)
        self._linger: int | None = None  # bytes still to drop before closing, once answered
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None  # loop time the last answer completed, if idle
        self._keep_alive_timer: asyncio.TimerHandle | None = None  # armed for _keep_alive_at
        self._keep_alive_at = 0.0
        self._running: RequestResponseCycle | None = None  # whose app runs, until it answers

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()  # a connection that never sends a request is closed too

    def connection_lost(self, exc: Exception | None) -> None:
        running = self._running
        if isinstance(running, PiecesCycle):
            running.lost()  # its client left: the app is told before its answer
        if isinstance(self.cycle, PiecesCycle):
            self.cycle.forget()  # an answer it never wrote
        self._disarm()
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:
            self._linger -= len(data)
            if self._linger < 0:
                self.transport.close()
            return
        if self._reading is _HEAD:
            self._raw_head += len(data)
        self._chunk = len(data)
        super().data_received(data)
        if self._reading is _NOTHING or self._linger is not None:
            return
        if self._reading is _HEAD and self._raw_head > self.limits.max_header_bytes:
            self._head_too_large = True
            self.send_400_response("request head too large")
        elif self._timer is None:
            self._arm()

    # --- parser callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading = _HEAD
        # the whole chunk, unless an earlier message ended in it (pipelining): then count
        # from the next chunk, letting one more read (uvloop's read size) through unchecked
        self._raw_head = self._chunk

    def on_headers_complete(self) -> None:
        limit = self.limits.max_header_bytes
        if self._raw_head > limit and self._head_size() > limit:  # checked only if it may be
            self._head_too_large = True
            raise _HeadTooLarge  # stops the parser; uvicorn then calls send_400_response
        hosts = [name for name, _ in self.headers].count(b"host")  # names are lower-cased
        if hosts > 1:
            self._bad_head = "more than one Host header (RFC 9112, 3.2)"
            raise _BadHead  # which host would the request be for? a proxy may read the other
        if not hosts and self.parser.get_http_version() != "1.0":
            self._bad_head = "an HTTP/1.1 request without a Host header (RFC 9112, 3.2)"
            raise _BadHead
        self._disarm()  # the head's timer; the body gets its own if it does not follow at once
        self._reading = _BODY
        before = self.cycle
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not before:
            adopted = PiecesCycle.adopt(cycle)  # the body's chunks handed over as they came
            adopted.scope[ANSWER_KEY] = adopted.answer  # type: ignore[literal-required]
            if cycle.scope["method"] != "HEAD":
                cycle.transport = _OneWriteAnswer(self.transport)  # type: ignore[assignment]

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if not isinstance(cycle, PiecesCycle):  # not adopted (an upgrade's): uvicorn's way
            super().on_body(body)
            return
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return  # as uvicorn: an upgrade's bytes, or a body after the answer, are dropped
        cycle.add(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._reading = _NOTHING
        self._chunk = 0
        super().on_message_complete()
        if self.cycle.response_complete and self._idle_since is None:
            # answered before the body ended (a 413): the body was read and dropped; idle
            # from now on, so the keep-alive timeout applies (uvicorn arms it only on answer)
            self._idle()

    # --- keep-alive: uvicorn's timeout, with one timer per connection -----------------------

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        """uvicorn's, noting the cycle whose app runs (a pipelined one starts only here)."""
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        """uvicorn's, except that an idle connection marks itself instead of arming a timer."""
        self._running = None  # its answer is written: nothing to tell, nothing to keep
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._idle()

    def _unset_keepalive_if_required(self) -> None:
        """Busy again (uvicorn calls this on every read): an armed timer will find it so."""
        self._idle_since = None

    def _idle(self) -> None:
        now = self.loop.time()
        self._idle_since = now
        if self._keep_alive_timer is None:
            self._arm_keep_alive(now + self.timeout_keep_alive)

    def _arm_keep_alive(self, when: float) -> None:
        self._keep_alive_at = when
        self._keep_alive_timer = self.loop.call_at(when, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        """Closes a connection idle for the keep-alive timeout; never early, never late.

        The timer was armed when some earlier idle spell began: if the connection is busy it
        lapses (the next answer arms one), if a later spell began it waits for that one's end.
        """
        self._keep_alive_timer = None
        if self._idle_since is None:
            return
        due = self._idle_since + self.timeout_keep_alive
        if due > self._keep_alive_at:
            self._arm_keep_alive(due)
            return
        self.timeout_keep_alive_handler()

    def _head_size(self) -> int:
        """The request line and headers' size (line ends and separators counted, about)."""
        return len(self.url) + 16 + sum(len(n) + len(v) + 4 for n, v in self.headers)

    # --- answers --------------------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request it cannot parse, as JSON; 431 for a head too large."""
        if self._head_too_large:
            limit = self.limits.max_header_bytes
            self._close_with(431, f"request line and headers over {limit} bytes")
        elif self._bad_head is not None:
            self._close_with(400, f"invalid HTTP request: {self._bad_head}")
        else:
            self._close_with(400, f"invalid HTTP request: {msg}")

    def _close_with(self, status: int, message: str) -> None:
        """Answers ``status`` and ends the connection: no more requests are read from it."""
        self._disarm()
        self._reading = _NOTHING
        if self.transport.is_closing() or self._linger is not None:
            return
        body = orjson.dumps({"error": message})
        head = (
            f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        )
        self.transport.write(head.encode("latin-1") + body)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._linger = LINGER_BYTES
        self._timer = self.loop.call_later(LINGER_S, self.transport.close)

    # --- timers ---------------------------------------------------------------------------

    def _arm(self) -> None:
        head = self._reading is _HEAD
        delay = self.limits.header_timeout_s if head else self.limits.body_timeout_s
        self._timer = self.loop.call_later(delay, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._reading is _HEAD:
            limit = self.limits.header_timeout_s
            self._close_with(408, f"request headers not complete within {limit:g} s")
        elif self._reading is _BODY:
            if self.flow.read_paused:  # the server stopped reading, not the client: wait on
                self._arm()
                return
            cycle = self.cycle
            if cycle.response_started:  # answered without reading the body: just hang up
                self._disarm()
                self.transport.close()
                return
            cycle.scope[BODY_TIMEOUT_KEY] = self.limits.body_timeout_s  # type: ignore[literal-required]
            cycle.disconnected = True  # the app's receive() returns; its answer is dropped
            cycle.message_event.set()
            limit = self.limits.body_timeout_s
            self._close_with(408, f"request body not complete within {limit:g} s")


def guarded_protocol(limits: ClientLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to give uvicorn (``http=``), bound to ``limits``."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})

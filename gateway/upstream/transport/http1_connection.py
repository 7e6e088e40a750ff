"""One keep-alive HTTP/1.1 client connection: an asyncio Protocol driving httptools' parser.

Why: callbacks on a Protocol cost less than a stream-based client (no StreamReader, no coroutine per
read; loadtests/bench_transport.py): a request is one ``write``, a reply is parsed as bytes arrive
and completes one future. Works on the default loop and on uvloop alike. A replica is an untrusted
peer, so the framing follows RFC 9112 strictly (the head's rules and caps: `reply_head`; checked
against h11 in tests/gateway/upstream). A large body is read straight into one buffer (`limits` says
why).

A body larger than its exchange's `AnswerRoom` lets in (``answer_free``) is held there before it
is read: its Content-Length before its buffer is made, or, without one, what has arrived plus one
read each time it outgrows what it holds. Where the room is not there at once, the connection
stops reading (what the replica sends waits in the sockets) until the room's wait ends: reading
resumes, or the exchange fails with its `Overloaded` and the connection is dropped, the body
unread. A reply within ``answer_free`` costs one comparison per read, nothing more.
"""

from __future__ import annotations

import asyncio
import functools
import select
from collections.abc import Callable, Sequence
from typing import NoReturn, cast

import httptools

from gateway.errors import (
    LocalResourceError,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.upstream.transport.deadline_timer import DeadlineTimer
from gateway.upstream.transport.limits import DEFAULT_LIMITS, ReplyLimits
from gateway.upstream.transport.local_errors import local_error
from gateway.upstream.transport.reply_head import (
    FRAMED,
    INTERIM,
    KNOWN_NAMES,
    HeadRefused,
    cap_message,
    framing,
    size_refusal,
)

# the buffer heads (and small bodies) are read into
_READ_BYTES = 64 * 1024
# optional whitespace (RFC 9110, 5.6.3)
_OWS = (b" ", b"\t")


class _NoCallbacks:
    """The protocol of the parser a lost connection keeps: no callbacks, no reference back."""


_INERT_PARSER = httptools.HttpResponseParser(_NoCallbacks())
_NO_BUFFER = memoryview(b"")


class _Rejected(Exception):
    """Raised in a parser callback to stop httptools; the waiter already holds the real error."""


class Connection(DeadlineTimer, asyncio.BufferedProtocol):
    """A client connection that runs one exchange at a time and says whether it can be reused.

    States: idle (no waiter) -> busy (`exchange` returned a future) -> idle again when the reply
    completes with keep-alive, or closed. ``got_bytes`` says whether any byte of the current
    reply arrived; the pool uses it to decide whether a failed exchange may be retried.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_lost: Callable[[Connection], None],
        limits: ReplyLimits = DEFAULT_LIMITS,
    ):
        self._loop = loop
        self._on_lost = on_lost
        self._limits = limits
        # the hot path reads the caps directly
        self._max_fields = limits.max_reply_header_count
        self._max_field_bytes = limits.max_reply_header_bytes
        self._max_body = limits.max_reply_body_bytes
        # where the current reply's body is held before it is read (None: read without asking)
        self._room: AnswerRoom | None = None
        # the body may grow to this many bytes before the room is asked for more (or the cap)
        self._granted = self._max_body
        # the room's wait in progress, reading paused meanwhile
        self._room_wait: asyncio.Task[None] | None = None
        self._read_buffer = memoryview(bytearray(_READ_BYTES))
        # the body being read straight in, if any
        self._direct: bytearray | None = None
        # bytes of ``_direct`` read so far
        self._filled = 0
        # the Content-Length of a body to read straight in, once known
        self._direct_size = 0
        # the head's verdict, for a body read straight in
        self._keep_alive_after = False
        self._transport: asyncio.Transport | None = None
        self._poll: select.poll | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Reply] | None = None
        # `DeadlineTimer`'s: armed for ``_armed_at``
        self._timer = None
        self._armed_at = 0.0
        # the current exchange's
        self._deadline = 0.0
        self._headers: dict[str, str] = {}
        # fields seen twice or more, in order
        self._repeats: dict[str, list[str]] | None = None
        self._body: list[bytes] = []
        # the reply to HEAD has no body, whatever its headers say
        self._head_request = False
        # the final (non-1xx) head is parsed: later fields are trailers
        self._final = False
        # a non-2xx reply with no framing: its body ends at EOF
        self._until_eof = False
        # bytes of this reply so far
        self._received = 0
        self._body_size = 0
        # header fields of this reply, interim replies and trailers included
        self._fields = 0
        self._field_bytes = 0
        self.got_bytes = False
        self.closed = False
        self.keep_alive = False

    # --- the exchange, called by the pool --------------------------------------------------

    def exchange(
        self,
        request: bytes | Sequence[bytes | memoryview],
        deadline: float,
        *,
        head: bool = False,
        room: AnswerRoom | None = None,
    ) -> asyncio.Future[Reply]:
        """Send one request (one buffer, or buffers sent as one vectored write); the future
        completes with the reply or fails with an upstream error.

        At ``deadline`` (loop time) the future fails with `UpstreamTimeout` and the connection
        is aborted, so a late reply can never be read by the next exchange (one loop timer
        serves many exchanges: `DeadlineTimer`). ``head`` says the request is a HEAD: httptools
        cannot be told, so that reply completes at its head and the connection is not reused.
        ``room``: where the reply's body is held before it is read (the module says how).
        """
        self.got_bytes = self.keep_alive = False
        self._head_request = head
        self._final = self._until_eof = False
        self._received = self._body_size = self._fields = self._field_bytes = 0
        self._direct_size = 0
        self._room = room
        if room is None:
            self._granted = self._max_body
        else:
            free = room.answer_free
            self._granted = free if free < self._max_body else self._max_body
        self._waiter = waiter = self._loop.create_future()
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            # lost before we could send: fail, don't hang
            waiter.set_exception(UpstreamConnectError("upstream closed the connection"))
            return waiter
        self._deadline = deadline
        if self._timer is None or deadline < self._armed_at:
            self._arm(deadline)
        if isinstance(request, bytes):
            transport.write(request)
        else:
            # writev on uvloop: the body's buffers, not a copy
            transport.writelines(request)
        return waiter

    @property
    def reusable(self) -> bool:
        transport = self._transport
        return self.keep_alive and not self.closed and not (transport and transport.is_closing())

    def has_unread_input(self) -> bool:
        """Whether the socket holds bytes (or EOF) that the loop has not delivered yet.

        An idle connection must have none: a byte there is a late or unsolicited reply (or the
        server's close) that would otherwise be read as the next request's reply. One
        zero-timeout poll(2), as urllib3's ``is_connection_dropped`` (loadtests/bench_transport.py).
        """
        return self._poll is not None and bool(self._poll.poll(0))

    def discard(self) -> None:
        """Its last reply was refused as a protocol error (`Reply.discard`): the
        stream is out of step, so drop it; the pool skips it from now on (not `reusable`)."""
        self.abort()

    def abort(self) -> None:
        """Drop the connection at once (no FIN handshake wait); idempotent."""
        self.keep_alive = False
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        self.keep_alive = False
        if self._transport is not None:
            self._transport.close()

    # --- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._poll = select.poll()
            self._poll.register(sock.fileno(), select.POLLIN)

    def get_buffer(self, sizehint: int) -> memoryview:
        direct = self._direct
        if direct is not None:
            # never past the body's end: later bytes stay in the socket
            return memoryview(direct)[self._filled :]
        return self._read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self._direct is not None:
            self._received += nbytes
            self._filled += nbytes
            if self._filled == len(self._direct):
                self._complete()
        else:
            self.data_received(self._read_buffer[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        if self._direct is not None:
            # a transport that gives no buffers (tests)
            self._copy_in(data)
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            # bytes nobody asked for: the stream is out of step, never reuse it
            self.abort()
            return
        self.got_bytes = True
        self._received += len(data)
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(UpstreamProtocolError(f"invalid HTTP/1.1 reply: {exc}"), exc)
            return
        if self._received > self._max_field_bytes and not waiter.done():
            self._check_framing_size()
        if self._direct_size and not waiter.done():
            self._read_direct()

    def eof_received(self) -> bool:
        # close our side too; connection_lost follows
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self._on_lost(self)
        try:
            self._settle_waiter(exc)
        finally:
            self._release()

    def _settle_waiter(self, exc: Exception | None) -> None:
        if self._waiter is None or self._waiter.done():
            return
        # the gateway's own lack of buffers or memory, not the replica
        local = local_error(exc)
        if self._until_eof and exc is None:
            self._complete()
        elif local is not None:
            self._fail(local, exc)
        elif self.got_bytes:
            self._fail(UpstreamProtocolError("upstream closed the connection mid-reply"), exc)
        else:
            message = "upstream closed the connection before replying"
            if self._transport is not None and self._transport.get_extra_info("ssl_object"):
                # TLS 1.3 clients finish the handshake before the server checks their
                # certificate; a refusal arrives as this close (as EOF, on both loops).
                message += " (as a TLS server does when it refuses the client certificate)"
            self._fail(UpstreamConnectError(message), exc)

    def _release(self) -> None:
        """A lost connection lets go at once of its read buffer, its parser and its last
        exchange. The parser holds the connection's callbacks and the last reply holds the
        connection: cycles that only a full collection of the cyclic garbage collector would
        free, and the gateway's collector settings make those rare, so every connection closed
        under load kept its read buffer until then. Broken here, it is freed by its last
        reference (the pool's, the transport's) going."""
        self._read_buffer = _NO_BUFFER
        self._parser = _INERT_PARSER
        self._waiter = None
        self._body = []
        self._direct = None
        self._room = None
        if self._room_wait is not None:
            self._stop_room_wait()

    # --- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None or self._waiter.done():
            # out of step: never reuse
            self._reject("a second reply to one request")
        self._headers = {}
        self._repeats = None
        self._body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        known = KNOWN_NAMES.get(name)
        if known is None:
            key = name.decode("latin-1").lower()
            # checked per read and at the end
            self._field_bytes += len(name) + len(value)
        else:
            key, size = known
            self._field_bytes += size + len(value)
        if self._fields > self._max_fields:
            self._reject(cap_message(self._limits, "reply header fields", "max_reply_header_count"))
        if self._final:
            # a trailer field: counted, never merged into the head
            return
        # llhttp strips only the leading OWS; endswith, not ``in b" \t"``: bytes' ``in`` tries
        # its operand as an integer first (a TypeError raised and cleared per field)
        if value.endswith(_OWS):
            value = value.rstrip(b" \t")
        text = value.decode("latin-1")
        headers = self._headers
        if key not in headers:
            headers[key] = text
            return
        # Repeats are collected and joined once at the head's end: joining each time would cost
        # quadratic time in the number of repeats (a stall of the loop: docs/measured.md).
        repeats = self._repeats
        if repeats is None:
            repeats = self._repeats = {}
        values = repeats.get(key)
        if values is None:
            repeats[key] = [headers[key], text]
        else:
            values.append(text)

    def on_headers_complete(self) -> None:
        parser = self._parser
        if self._repeats:
            # joined before the rules read them (a repeated Transfer-Encoding)
            headers = self._headers
            for key, values in self._repeats.items():
                headers[key] = ", ".join(values)
        status = parser.get_status_code()
        try:
            verdict = framing(
                status,
                self._headers,
                self._limits,
                # read for 1xx only
                keep_alive=status >= 200 or parser.should_keep_alive(),
                head_request=self._head_request,
            )
        except HeadRefused as refused:
            self._reject(str(refused))
        if verdict is INTERIM:
            # 100 Continue, 103 Early Hints: dropped, the final head follows
            return
        self._final = True
        if verdict is not FRAMED:
            self._until_eof = verdict.until_eof
            self._direct_size = verdict.direct_size
        if self._head_request:
            self._complete()

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._granted:
            self._outgrown()
        self._body.append(body)

    def _outgrown(self) -> None:
        """The body outgrew what it may hold: over the cap, refused; else room for what has
        arrived plus one read is asked for (unless a wait for it runs already)."""
        size = self._body_size
        if size > self._max_body:
            self._reject(cap_message(self._limits, "reply body", "max_reply_body_bytes"))
        if self._room_wait is None:
            want = size + _READ_BYTES
            self._ask_room(want if want < self._max_body else self._max_body)

    def on_message_complete(self) -> None:
        if self._final:
            # else an interim reply ended
            self._complete()

    # --- a body read straight in ---------------------------------------------------------

    def _read_direct(self) -> None:
        """The head is parsed, the body is large: the rest goes into one buffer. The parser,
        left mid-body (this read's body bytes are copied in), is replaced at the body's end.
        Not before its room holds it: until then reading stays paused."""
        size = self._direct_size
        if size > self._granted and (self._room_wait is not None or not self._ask_room(size)):
            return
        self._keep_alive_after = self._parser.should_keep_alive()
        direct = self._direct = bytearray(size)
        filled = 0
        for chunk in self._body:
            direct[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
        self._body = []
        self._filled = filled

    def _copy_in(self, data: bytes | memoryview) -> None:
        direct = cast(bytearray, self._direct)
        take = min(len(data), len(direct) - self._filled)
        direct[self._filled : self._filled + take] = data[:take]
        self._filled += take
        self._received += take
        if self._filled == len(direct):
            self._complete()
            if len(data) > take:
                # past the reply's end: out of step, dropped
                self.data_received(data[take:])

    # --- completion -----------------------------------------------------------------------------

    def _complete(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._field_bytes > self._max_field_bytes:
            self._check_framing_size()
            return
        parser = self._parser
        status = parser.get_status_code()
        direct = self._direct
        if direct is not None:
            self._direct, self._direct_size = None, 0
            # the current one is mid-body
            self._parser = httptools.HttpResponseParser(self)
            self.keep_alive = self._keep_alive_after
            # the one copy: a reply body is immutable bytes downstream
            body = bytes(direct)
        else:
            self.keep_alive = (
                not self._until_eof and not self._head_request and parser.should_keep_alive()
            )
            body = b"".join(self._body)
        self._body = []
        if not self.keep_alive:
            # else it stays armed for the next exchange (see `exchange`)
            self._cancel_timer()
        if self._room_wait is not None:
            # the rest of a read that came before the pause ended the body: it is in memory
            self._stop_room_wait()
        # kept, it would hold its request while the connection idles in the pool
        self._room = None
        waiter.set_result(Reply(status, self._headers, body, self))
        # Settled: from here on no exchange is in progress (every check reads None as done).
        # Kept, the future would hold the reply, its body included, for as long as the
        # connection idles in the pool: an image model's large answers, one per idle connection.
        self._waiter = None

    def _fail(self, error: Exception, cause: BaseException | None) -> None:
        self._cancel_timer()
        if self._room_wait is not None:
            self._stop_room_wait()
        # the connection is dropped: so is a body half read straight in
        self._direct = None
        self.abort()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            error.__cause__ = cause
            waiter.set_exception(error)

    # --- room for the body ------------------------------------------------------------------

    def _ask_room(self, want: int) -> bool:
        """Room for ``want`` bytes of body: True when the room holds them now; else False,
        reading paused while the room's wait runs (`_room_given` ends it)."""
        room = cast(AnswerRoom, self._room)
        if room.hold_answer(want):
            self._granted = want
            return True
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.pause_reading()
        wait = self._room_wait = self._loop.create_task(room.wait_answer(want))
        wait.add_done_callback(functools.partial(self._room_given, want))
        return False

    def _room_given(self, want: int, wait: asyncio.Task[None]) -> None:
        """The room's wait ended: reading resumes where it paused, or the exchange fails with
        the room's refusal and the connection is dropped, the body unread."""
        if wait is not self._room_wait:
            # stopped: the exchange ended meanwhile
            return
        self._room_wait = None
        raised = None if wait.cancelled() else wait.exception()
        if raised is not None or wait.cancelled():
            if not isinstance(raised, Exception):
                raised = LocalResourceError("the wait for room for the reply's body was cancelled")
            self._fail(raised, None)
            return
        self._granted = want
        if self._direct_size and self._direct is None and self._busy():
            self._read_direct()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _stop_room_wait(self) -> None:
        """The exchange ended while its room's wait ran: the wait is cancelled (whatever it
        was granted stays the request's, given back when it ends) and reading resumes."""
        wait = cast("asyncio.Task[None]", self._room_wait)
        self._room_wait = None
        wait.cancel()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _check_framing_size(self) -> None:
        """Run after each read once the reply outgrows the header cap (`size_refusal`)."""
        refusal = size_refusal(
            self._limits, self._field_bytes, self._received, self._body_size, self._final
        )
        if refusal is not None:
            self._fail(UpstreamProtocolError(refusal), None)

    def _reject(self, reason: str) -> NoReturn:
        """Fail the exchange with a protocol error; the raise stops the parser mid-read."""
        self._fail(UpstreamProtocolError(reason), None)
        raise _Rejected(reason)

    def _busy(self) -> bool:
        return self._waiter is not None and not self._waiter.done()

    def _time_out(self) -> None:
        self._fail(UpstreamTimeout("no complete reply from upstream within the timeout"), None)

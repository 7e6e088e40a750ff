"""One client connection: HTTP/1.1 parsed by httptools, each request run as one handler task.

The parser's callbacks build a `Request`; when it is first in line its handler runs as a task,
``handler(request, answer)`` (the router's choice). Answers leave in request order, one handler
at a time; the next starts once the previous answer is complete and flushed, so a client that
does not read holds one answer in memory, not one per request it sent.

What a client may take is bounded (`gateway.worker.http.limits`):

- **Pipelining.** httptools parses a whole read in one call and cannot pause, so a read is fed
  in slices that each end at a head's end (``CRLF CRLF``, which llhttp requires: bare LF is
  refused) whenever more than one head may follow; once ``max_pipelined`` parsed requests wait,
  the rest of the read is kept unparsed and the connection is not read until they are
  answered (at most ``max_pipelined`` + 1 wait: a slice can complete one more).
- **Heads.** Bytes read since a head began are counted; over ``max_header_bytes`` (or more than
  ``max_headers`` fields) it is a 431. Two ``Host`` fields, or none in HTTP/1.1, are a 400
  (RFC 9112 3.2).
- **Bodies.** The bytes a body takes on the wire (sizes, extensions, trailers) count toward
  ``max_body_bytes`` (413), and a declared length over it is refused at the head. A body's
  unread chunks pause reading past `HIGH_WATER_BYTES`.
- **Time.** One timer per connection, re-armed lazily (a deadline that moves later costs an
  assignment, not a timer): the head's and the body's timeouts and rate (408), the keep-alive
  timeout (closed quietly), the write timeout (dropped). A request that arrives whole in one
  read arms nothing.
- **Errors.** The server's own answers (400, 408, 413, 431, 503, 505) are JSON, close the
  connection and linger (read and drop, bounded) so the client reads them; a refusal waits for
  the answers owed to requests before it.

**Disconnects.** When the connection is lost, the handler whose answer is not complete is
cancelled and anything it writes is dropped. An end of stream from the client counts as its
leaving: RFC 9112 (9.6) lets a client close at any time, a server cannot tell a half-close
from a close until it writes, and nginx reads it the same way (its 499); a client that
half-closes after its request and waits for the answer is not served.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING

import httptools

from gateway.clock import TIMER_SLACK_S
from gateway.errors import BadRequest, GatewayError, PayloadTooLarge, RequestTimeout
from gateway.worker.http.answer import JSON_LINE, STATUS_LINE, Answer, Date, error_body
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.request import HIGH_WATER_BYTES, Request
from gateway.worker.http.serving import serve

if TYPE_CHECKING:
    from gateway.worker.http.connections import Connections
    from gateway.worker.http.router import PathRouter

log = logging.getLogger(__name__)

INF = float("inf")
_HEAD_END = b"\r\n\r\n"
# searched for another head rather than parsed in a slice of its own
_SMALL_REST = 4096
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# reading states: between requests, in a head, in a body, no more (refused or closing)
_IDLE, _HEAD, _BODY, _STOPPED = 0, 1, 2, 3
# why reading is paused (bits)
_FOR_BODY, _FOR_QUEUE, _FOR_END = 1, 2, 4
# the header names the protocol itself reads (0: only a handler's)
_HANDLERS, _HOST, _EXPECT, _LENGTH, _ENCODING = 0, 1, 2, 3, 4
_OWN = {
    b"host": _HOST,
    b"expect": _EXPECT,
    b"content-length": _LENGTH,
    b"transfer-encoding": _ENCODING,
}
# shared while a head has none of the wanted headers
_NONE_FOUND: dict[str, str] = {}
_METHODS = {m.encode(): m for m in ("GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH")}
# every request's task's name
_TASK = "http request"


class _Refused(Exception):
    """Raised in a parser callback to stop the parser; the refusal is already recorded."""


# a lost connection's parser (nothing reads for it): its own would keep it in a cycle
_NO_PARSER = httptools.HttpRequestParser(object())


class HttpProtocol(asyncio.Protocol):
    def __init__(
        self,
        router: PathRouter,
        limits: ClientLimits,
        connections: Connections,
        wanted: Mapping[bytes, str],
    ) -> None:
        self._router = router
        self._limits = limits
        self._connections = connections
        # header name -> (the protocol's use of it, its key in `Request.wanted` or None)
        self._interesting: dict[bytes, tuple[int, str | None]] = {
            name: (_OWN.get(name, _HANDLERS), key) for name, key in wanted.items()
        }
        for name, own in _OWN.items():
            self._interesting.setdefault(name, (own, None))
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made
        self.peer = ""
        # answers from now on close the connection (drain, refusal)
        self.closing = False
        # parsed, not yet answered; the first is served
        self._queue: deque[Request] = deque()
        # whose body the parser is in
        self._receiving: Request | None = None
        # the first's handler
        self._task: asyncio.Task[None] | None = None
        self._reading = _IDLE
        self._pauses = 0
        # the rest of a read kept while too many requests wait
        self._unparsed = b""
        self._unparsed_at = 0
        self._write_paused = False
        self._unflushed: list[Answer] = []
        self._drain_waiters: list[asyncio.Future[None]] = []
        # an answer is complete; the next waits for the flush
        self._next_waits = False
        self._refusal: tuple[int, str] | None = None
        # bytes still to drop before closing, once refused
        self._linger = -1
        self._lost = False
        self._aborted = False
        # the head being read
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._found: dict[str, str] = _NONE_FOUND
        self._hosts = 0
        self._expects = False
        self._declared = b""
        self._chunked = False
        # a Content-Length body's bytes still to come (-1: chunked)
        self._body_left = 0
        # the size of the slice being parsed
        self._slice = 0
        # bytes read since the head began: at least the head's size
        self._raw_head = 0
        # the body's bytes on the wire so far
        self._raw_body = 0
        # body bytes the parser gave in this slice
        self._slice_body = 0
        # timers: one, armed at `_timer_at`, for the earliest of these
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = INF
        self._head_due = INF
        self._body_due = INF
        # when the body's first bytes came (or reading last resumed)
        self._rate_from = INF
        # the body's bytes then
        self._rate_base = 0
        self._idle_due = INF
        self._write_due = INF

    # --- the connection -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # told of anything left unsent
        self.transport.set_write_buffer_limits(0, 0)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else ""
        refusal = self._connections.admit(self)
        if refusal is not None:
            self.closing = True
            self._refuse(503, refusal)
            return
        self._head_due = self._loop.time() + self._limits.header_timeout_s
        self._arm(self._head_due)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._connections.forget(self)
        self._disarm()
        task = self._task
        for request in self._queue:
            answer = request.answer
            if answer is not None and not answer.complete:
                answer.dropped = True
                answer.settle(False)
        if task is not None and not task.done():
            answer = self._queue[0].answer if self._queue else None
            if answer is None or not answer.complete:
                task.cancel()
        self._queue.clear()
        # The parser calls this protocol's bound methods: a cycle the collector would free.
        self._parser = _NO_PARSER
        flushed = exc is None and not self._aborted
        for answer in self._unflushed:
            answer.settle(flushed)
        self._unflushed.clear()
        self._wake_drained()

    def eof_received(self) -> bool | None:
        """The client has gone (see the module's docstring): the transport closes."""
        return None

    @property
    def held(self) -> int:
        """Bytes this connection holds for its client: bodies read but not yet taken by
        their handlers, a read kept unparsed, answers not yet sent."""
        held = len(self._unparsed) - self._unparsed_at
        for request in self._queue:
            held += request.buffered
        if self.transport is not None:
            held += self.transport.get_write_buffer_size()
        return held

    def drain(self) -> None:
        """Answers from now on close the connection; an idle one closes now."""
        self.closing = True
        if not self._queue and self._reading == _IDLE and self._linger < 0:
            self.transport.close()

    def abort(self) -> None:
        self._aborted = True
        self.transport.abort()

    # --- reading ------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._linger >= 0:
            self._linger -= len(data)
            if self._linger < 0:
                self.transport.close()
            return
        self._feed(data, 0)

    def _feed(self, data: bytes, start: int) -> None:
        """Parses ``data[start:]`` in slices, stopping while too many requests wait.

        A slice ends after the next head's end, unless nothing but a small rest follows it;
        the bytes a Content-Length body still has to come are never searched."""
        limit = self._limits.max_pipelined
        size = len(data)
        parser = self._parser
        while start < size:
            reading = self._reading
            if reading == _BODY:
                left = self._body_left
                search = start if left < 0 else start + left
            elif reading == _STOPPED:
                return
            elif len(self._queue) >= limit:
                self._unparsed, self._unparsed_at = data, start
                self._pause(_FOR_QUEUE)
                return
            else:
                search = start
            end = size
            if search < size:
                cut = data.find(_HEAD_END, search) + 4
                if (
                    cut > 3
                    and cut < size
                    and (size - cut > _SMALL_REST or data.find(_HEAD_END, cut) >= 0)
                ):
                    end = cut
            receiving = self._receiving
            self._slice = end - start
            self._slice_body = 0
            if reading != _BODY:
                self._raw_head += end - start
            try:
                parser.feed_data(
                    data if start == 0 and end == size else memoryview(data)[start:end]
                )
            except httptools.HttpParserUpgrade:
                self._upgraded()
                return
            except httptools.HttpParserError as exc:
                if self._refusal is None:
                    self._refuse(400, f"invalid HTTP request: {_reason(exc)}")
                return
            if self._reading != _IDLE and not self._incomplete(reading, receiving):
                return
            start = end

    def _incomplete(self, reading: int, receiving: Request | None) -> bool:
        """After a slice that left a head or a body incomplete: its limits and timers; False
        once nothing more is to be parsed."""
        now_reading = self._reading
        limits = self._limits
        if now_reading == _HEAD:
            if self._raw_head > limits.max_header_bytes:
                self._refuse(431, f"request line and headers over {limits.max_header_bytes} bytes")
                return False
            if self._head_due == INF:
                self._head_due = self._loop.time() + limits.header_timeout_s
                self._arm(self._head_due)
            return True
        if now_reading == _BODY:
            return self._body_read(reading, receiving)
        return False

    def _body_read(self, reading: int, receiving: Request | None) -> bool:
        """After a slice that left a body incomplete: its framing counted, its timers set."""
        limits = self._limits
        if reading == _BODY and receiving is self._receiving:
            # the whole slice was body
            self._raw_body += self._slice - self._slice_body
        if limits.max_body_bytes is not None and self._raw_body > limits.max_body_bytes:
            self._refuse_body(PayloadTooLarge(f"request body over {limits.max_body_bytes} bytes"))
            return False
        if self._body_due == INF:
            now = self._loop.time()
            self._body_due = now + limits.body_timeout_s
            self._arm(self._body_due)
        if self._rate_from == INF and self._raw_body and limits.min_body_rate:
            self._rate_from = self._loop.time()
            self._rate_base = self._raw_body
            self._arm(self._rate_due())
        return True

    def _pause(self, why: int) -> None:
        if not self._pauses and not self._lost:
            self.transport.pause_reading()
        self._pauses |= why

    def _resume(self, why: int) -> None:
        if not self._pauses & why:
            return
        self._pauses &= ~why
        if self._pauses or self._lost:
            return
        self.transport.resume_reading()
        if why == _FOR_BODY and self._rate_from != INF:
            # the client was not at fault
            self._rate_from = self._loop.time()
            self._rate_base = self._raw_body

    # --- parser callbacks ----------------------------------------------------------------

    def on_url(self, url: bytes) -> None:
        # (a head begins with its method: a few bytes are not noticed)
        self._reading = _HEAD
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._reading == _BODY:
            # a trailer: counted with the body, not a header
            return
        name = name.lower()
        headers = self._headers
        headers.append((name, value))
        if len(headers) > self._limits.max_headers:
            self._stop(431, f"more than {self._limits.max_headers} header fields")
        interesting = self._interesting.get(name)
        if interesting is None:
            return
        own, key = interesting
        if key is not None:
            if self._found is _NONE_FOUND:
                self._found = {}
            self._found[key] = value.decode("latin-1")
        if own == _HOST:
            self._hosts += 1
        elif own == _LENGTH:
            self._declared = value
        elif own == _EXPECT:
            self._expects = value.lower() == b"100-continue"
        elif own == _ENCODING:
            # llhttp refuses it with a length, or without chunked last; any other coding
            # would reach the handler still encoded
            if self._chunked or value.strip().lower() != b"chunked":
                self._stop(501, f"transfer coding {value.decode('latin-1')!r} not implemented")
            self._chunked = True

    def on_headers_complete(self) -> None:
        limits = self._limits
        if self._raw_head > limits.max_header_bytes and self._head_size() > limits.max_header_bytes:
            self._stop(431, f"request line and headers over {limits.max_header_bytes} bytes")
        parser = self._parser
        version = parser.get_http_version()
        if version != "1.1" and (version != "1.0" or not limits.http10):
            self._stop(505, f"HTTP/{version} is not supported")
        if self._hosts > 1:
            self._stop(400, "invalid HTTP request: more than one Host header (RFC 9112, 3.2)")
        if not self._hosts and version != "1.0":
            why = "an HTTP/1.1 request without a Host header"
            self._stop(400, f"invalid HTTP request: {why} (RFC 9112, 3.2)")
        # llhttp checked the digits
        declared = int(self._declared) if self._declared else 0
        if limits.max_body_bytes is not None and declared > limits.max_body_bytes:
            # what the client is about to send: lingered over
            self._body_left = declared
            self._stop(413, f"request body over {limits.max_body_bytes} bytes")
        self._body_left = -1 if self._chunked else declared
        method = parser.get_method()
        path, _, query = self._url.partition(b"?")
        request = Request(
            self,
            _METHODS.get(method) or method.decode("latin-1"),
            path,
            query,
            self._headers,
            self._found,
            version,
            parser.should_keep_alive(),
            self.peer,
            self._expects,
        )
        self._receiving = request
        self._reading = _BODY
        self._head_due = INF
        self._raw_body = 0
        # the next head's
        self._url = b""
        self._headers = []
        self._found = _NONE_FOUND
        self._hosts = 0
        if self._expects:
            self._expects = False
        if self._declared:
            self._declared = b""
        if self._chunked:
            self._chunked = False
        queue = self._queue
        queue.append(request)
        if len(queue) == 1 and not self._next_waits:
            self._start(request)

    def on_body(self, body: bytes) -> None:
        self._raw_body += len(body)
        self._slice_body += len(body)
        if self._body_left > 0:
            self._body_left -= len(body)
        request = self._receiving
        if request is None:
            return
        answer = request.answer
        if answer is not None and answer.complete:
            # answered without it: read and dropped
            return
        if request.arrived(body):
            self._pause(_FOR_BODY)

    def on_message_complete(self) -> None:
        request = self._receiving
        self._receiving = None
        self._reading = _IDLE
        # a head that begins after this in the slice counts from the next slice, letting one
        # slice (at most a read) more through unchecked
        self._raw_head = 0
        self._body_left = 0
        self._body_due = self._rate_from = INF
        if request is None:
            return
        request.end_body()
        answer = request.answer
        if answer is not None and answer.complete and self._queue and self._queue[0] is request:
            # answered before its body ended: now it is done with
            self._advance()

    def _upgraded(self) -> None:
        """A request asking to switch protocols (or CONNECT): served as a plain request on a
        connection that closes after it; the bytes after its head are not read."""
        self._reading = _STOPPED
        self._pause(_FOR_END)
        self.closing = True

    # --- handlers -----------------------------------------------------------------------

    def _start(self, request: Request) -> None:
        answer = request.answer = Answer(self, request)
        handler = self._router.route(request)
        # A task named here: one left to the loop formats a "Task-N" name for every request
        # (the loop's create_task, task factory unset as on a worker, builds the same task).
        self._task = asyncio.Task(serve(handler, request, answer), loop=self._loop, name=_TASK)

    def written(self, answer: Answer, close: bool) -> None:
        """`Answer`'s call once its last bytes are with the transport."""
        if self._write_paused:
            self._unflushed.append(answer)
        else:
            answer.settle(True)
        queue = self._queue
        if not queue or queue[0].answer is not answer:
            return
        request = queue[0]
        if close:
            self._close_after(request)
            return
        if not request.body_ended:
            # what is left of it is read and dropped
            request.drop_body()
            self._resume(_FOR_BODY)
            return
        queue.popleft()
        self._task = None
        if self._write_paused:
            self._next_waits = True
            return
        if queue or self._refusal is not None or self._reading != _IDLE or self.closing:
            self._next()
            return
        due = self._idle_due = self._loop.time() + self._limits.keep_alive_s
        if due < self._timer_at:
            self._arm(due)
        if self._pauses & _FOR_QUEUE:
            self._feed_unparsed()

    def _advance(self) -> None:
        """The first request is done with: the next one runs once the answer is flushed."""
        self._queue.popleft()
        self._task = None
        if self._write_paused:
            self._next_waits = True
            return
        self._next()

    def _next(self) -> None:
        self._next_waits = False
        queue = self._queue
        if queue:
            self._start(queue[0])
        elif self._refusal is not None:
            self._write_refusal()
            return
        elif self._reading == _IDLE:
            if self.closing:
                self.transport.close()
                return
            self._idle_due = self._loop.time() + self._limits.keep_alive_s
            self._arm(self._idle_due)
        if self._pauses & _FOR_QUEUE:
            self._feed_unparsed()

    def _feed_unparsed(self) -> None:
        """The rest of a read kept while too many requests waited: parsed now there is room."""
        data, start = self._unparsed, self._unparsed_at
        self._unparsed, self._unparsed_at = b"", 0
        self._resume(_FOR_QUEUE)
        self._feed(data, start)

    def _close_after(self, request: Request) -> None:
        """The answer says ``connection: close``: nothing more is parsed or answered."""
        self.closing = True
        self._reading = _STOPPED
        queue = self._queue
        queue.popleft()
        self._task = None
        for later in queue:
            later.stop(BadRequest("the connection closed before this request was answered"))
        queue.clear()
        if request.body_ended and not self._unparsed:
            self.transport.close()
        else:
            self._linger_then_close()

    # --- writing ------------------------------------------------------------------------

    def pause_writing(self) -> None:
        self._write_paused = True
        self._write_due = self._loop.time() + self._limits.write_timeout_s
        self._arm(self._write_due)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._write_due = INF
        unflushed, self._unflushed = self._unflushed, []
        for answer in unflushed:
            answer.settle(True)
        self._wake_drained()
        if self._next_waits:
            self._next()

    async def drained(self) -> None:
        if not self._write_paused or self._lost:
            return
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def _wake_drained(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def continue_body(self) -> None:
        """`Request.read` waits for a body the client holds back for ``100-continue``."""
        if not self._lost and not self.transport.is_closing():
            self.transport.write(_CONTINUE)

    def body_taken(self) -> None:
        if self._pauses & _FOR_BODY:
            self._resume(_FOR_BODY)

    # --- refusals -----------------------------------------------------------------------

    def _stop(self, status: int, message: str) -> None:
        """A refusal from inside a parser callback: recorded, then the parser is stopped."""
        self._refuse(status, message)
        raise _Refused

    def _refuse_body(self, error: GatewayError) -> None:
        self._refuse(error.status, error.message, error)

    def _refuse(self, status: int, message: str, error: GatewayError | None = None) -> None:
        """Answers ``status`` in the place of the request being read (after the answers owed
        to those before it), then closes; nothing more is parsed."""
        if self._refusal is not None or self._lost:
            return
        self._refusal = (status, message)
        self._connections.refused(status)
        self._reading = _STOPPED
        self._pause(_FOR_END)
        self._unparsed, self._unparsed_at = b"", 0
        self._head_due = self._body_due = self._rate_from = self._idle_due = INF
        queue = self._queue
        request = self._receiving
        self._receiving = None
        if request is not None:
            request.stop(error or BadRequest(message))
            answer = request.answer
            if answer is not None and answer.started:
                # answered (or answering) already: no second answer can follow; hang up
                if answer.complete:
                    self.transport.close()
                else:
                    self.abort()
                return
            if answer is not None:
                answer.dropped = True
                answer.settle(False)
                self._task = None
            if queue and queue[-1] is request:
                queue.pop()
        if not queue:
            self._write_refusal()

    def _write_refusal(self) -> None:
        assert self._refusal is not None
        status, message = self._refusal
        body = error_body(message)
        head = b"%s%s%scontent-length: %d\r\nconnection: close\r\n\r\n" % (
            STATUS_LINE[status],
            Date.line,
            JSON_LINE,
            len(body),
        )
        self.transport.write(head + body)
        self._linger_then_close()

    def _linger_then_close(self) -> None:
        """Reads and drops what the client still sends, bounded, so it reads the answer."""
        self._reading = _STOPPED
        transport = self.transport
        if transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        limits = self._limits
        linger_s, self._linger = limits.linger_s, limits.linger_bytes
        if self._body_left > limits.linger_bytes:
            # the rest of a body it declared
            linger_s = limits.linger_body_s
            self._linger = min(self._body_left, limits.linger_body_bytes)
        self._pauses = 0
        transport.resume_reading()
        self._disarm()
        self._timer = self._loop.call_later(linger_s, transport.close)
        # nothing re-arms it
        self._timer_at = -INF

    # --- timers -------------------------------------------------------------------------

    def _arm(self, when: float) -> None:
        """The timer fires by ``when`` (earlier is fine: it re-arms for what is then due)."""
        if when >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._tick)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = INF

    def _rate_due(self) -> float:
        limits = self._limits
        sent = self._raw_body - self._rate_base
        return self._rate_from + limits.body_rate_grace_s + sent / limits.min_body_rate

    def _tick(self) -> None:
        self._timer = None
        self._timer_at = INF
        if self._lost or self._linger >= 0:
            return
        now = self._loop.time() + TIMER_SLACK_S
        limits = self._limits
        if self._write_paused and now >= self._write_due:
            log.info("dropping %s: an answer unread for %g s", self.peer, limits.write_timeout_s)
            self.abort()
            return
        reading = self._reading
        if reading <= _HEAD and now >= self._head_due:
            # a head begun, or none since connect
            limit = limits.header_timeout_s
            self._refuse(408, f"request headers not complete within {limit:g} s")
            return
        if reading == _BODY:
            if self._pauses:
                # the server stopped reading, not the client: wait on
                self._body_due = max(self._body_due, now + limits.body_timeout_s)
            elif now >= self._body_due:
                limit = limits.body_timeout_s
                self._refuse_body(RequestTimeout(f"request body not complete within {limit:g} s"))
                return
            elif self._rate_from != INF and now >= self._rate_due():
                rate = limits.min_body_rate
                self._refuse_body(RequestTimeout(f"request body slower than {rate:g} bytes/s"))
                return
        if reading == _IDLE and not self._queue and now >= self._idle_due:
            self.transport.close()
            return
        self._rearm()

    def _rearm(self) -> None:
        due = self._write_due if self._write_paused else INF
        reading = self._reading
        if reading <= _HEAD:
            due = min(due, self._head_due)
        elif reading == _BODY:
            due = min(due, self._body_due)
            if self._rate_from != INF:
                due = min(due, self._rate_due())
        if reading == _IDLE and not self._queue:
            due = min(due, self._idle_due)
        if due != INF:
            self._arm(due)

    def _head_size(self) -> int:
        """The request line and headers' size (line ends and separators counted, about)."""
        return len(self._url) + 16 + sum(len(n) + len(v) + 4 for n, v in self._headers)


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


__all__ = ["HIGH_WATER_BYTES", "HttpProtocol"]

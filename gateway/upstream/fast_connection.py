"""One keep-alive HTTP/1.1 client connection: an asyncio Protocol driving httptools' parser.

Why: callbacks on a Protocol cost a fraction of a stream-based client (no StreamReader, no
coroutine per read): a request is one ``write``, a reply is parsed as bytes arrive and completes
one future. Works on the default loop and on uvloop alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

import httptools

from gateway.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from gateway.upstream.transport import UpstreamResponse


class Connection(asyncio.Protocol):
    """A client connection that runs one exchange at a time and says whether it can be reused.

    States: idle (no waiter) -> busy (`exchange` returned a future) -> idle again when the reply
    completes with keep-alive, or closed. ``got_bytes`` says whether any byte of the current
    reply arrived; the pool uses it to decide whether a failed exchange may be retried.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[Connection], None]):
        self._loop = loop
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[UpstreamResponse] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._until_eof = False  # reply has neither Content-Length nor chunked: body ends at EOF
        self.got_bytes = False
        self.closed = False
        self.keep_alive = False

    # --- the exchange, called by the pool --------------------------------------------------

    def exchange(self, request: bytes, deadline: float) -> asyncio.Future[UpstreamResponse]:
        """Send one request; the future completes with the reply or fails with an upstream error.

        At ``deadline`` (loop time) the future fails with `UpstreamTimeout` and the connection
        is aborted, so a late reply can never be read by the next exchange.
        """
        self.got_bytes = False
        self.keep_alive = False
        self._waiter = waiter = self._loop.create_future()
        transport = cast(asyncio.Transport, self._transport)
        if self.closed or transport.is_closing():  # lost before we could send: fail, don't hang
            waiter.set_exception(UpstreamConnectError("upstream closed the connection"))
            return waiter
        self._timer = self._loop.call_at(deadline, self._on_timeout)
        transport.write(request)
        return waiter

    @property
    def reusable(self) -> bool:
        transport = self._transport
        return self.keep_alive and not self.closed and not (transport and transport.is_closing())

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

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self.abort()  # bytes nobody asked for: the stream is out of step, never reuse it
            return
        self.got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._fail(UpstreamProtocolError("upstream switched protocols"), exc)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"invalid HTTP/1.1 reply: {exc}"), exc)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._cancel_timer()
        self._on_lost(self)
        if self._waiter is None or self._waiter.done():
            return
        if self._until_eof and exc is None:
            self._complete()
        elif self.got_bytes:
            self._fail(UpstreamProtocolError("upstream closed the connection mid-reply"), exc)
        else:
            self._fail(UpstreamConnectError("upstream closed the connection before replying"), exc)

    # --- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._waiter is None or self._waiter.done():
            self.abort()  # a second reply in the same read: out of step, never reuse
        self._headers = {}
        self._body = []
        self._until_eof = False

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self._headers.get(key)
        self._headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        framed = "content-length" in self._headers or "transfer-encoding" in self._headers
        self._until_eof = not framed and status >= 200 and status not in (204, 304)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete()

    # --- completion -----------------------------------------------------------------------------

    def _complete(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        self._cancel_timer()
        self.keep_alive = not self._until_eof and self._parser.should_keep_alive()
        status = self._parser.get_status_code()
        waiter.set_result(UpstreamResponse(status, self._headers, b"".join(self._body)))

    def _fail(self, error: Exception, cause: BaseException | None) -> None:
        self._cancel_timer()
        self.abort()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            error.__cause__ = cause
            waiter.set_exception(error)

    def _on_timeout(self) -> None:
        self._timer = None
        self._fail(UpstreamTimeout("no complete reply from upstream within the timeout"), None)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

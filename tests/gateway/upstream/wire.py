"""Drive one `Connection` exchange with bytes from a test, no socket: a fake asyncio transport.

The tests feed a reply in any chunking, then the server's close, and read back what the caller
would get (a reply or one of our errors) and whether the pool would reuse the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gateway.errors import UpstreamError
from gateway.upstream.transport.base import Reply
from gateway.upstream.transport.http1_connection import Connection
from gateway.upstream.transport.limits import DEFAULT_LIMITS, ReplyLimits


class FakeTransport(asyncio.Transport):
    """Records writes and whether the connection was closed or aborted."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def abort(self) -> None:
        self.closing = self.aborted = True

    def close(self) -> None:
        self.closing = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


@dataclass(frozen=True)
class Result:
    """What the caller got (``reply`` or ``error``) and whether the pool would reuse it."""

    reply: Reply | None
    error: UpstreamError | None
    reusable: bool
    bytes_fed: int  # the transport stops reading once the connection is aborted


def exchange(
    loop: asyncio.AbstractEventLoop,
    chunks: Iterable[bytes],
    *,
    head: bool = False,
    limits: ReplyLimits = DEFAULT_LIMITS,
    close: bool = True,
) -> Result:
    """One exchange: feed ``chunks`` as reads, then (if ``close``) the server's close."""
    conn = Connection(loop, lambda _: None, limits)
    wire = FakeTransport()
    conn.connection_made(wire)
    waiter = conn.exchange(b"POST / HTTP/1.1\r\n\r\n", loop.time() + 3600.0, head=head)
    fed = 0
    for chunk in chunks:
        if wire.closing:
            break  # an aborted transport delivers nothing more
        conn.data_received(chunk)
        fed += len(chunk)
    reusable = waiter.done() and waiter.exception() is None and conn.reusable
    if close:
        conn.eof_received()
        conn.connection_lost(None)
    if not waiter.done():
        return Result(None, None, False, fed)
    error = waiter.exception()
    if error is None:
        return Result(waiter.result(), None, reusable, fed)
    assert isinstance(error, UpstreamError), f"foreign exception escaped: {error!r}"
    return Result(None, error, False, fed)

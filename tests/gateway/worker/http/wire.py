"""Feed bytes to one `HttpProtocol` with no socket, as a client would send them in any split.

`serve_bytes` feeds the pieces in order (holding them back while the protocol has paused
reading, as a transport does), lets every handler run, and returns what the handlers saw
(method, target, headers, body of each request) and how the server ended (the status of its
own refusal, if any). The handler reads each body to its end and answers 200.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.worker.http.answer import Answer
from gateway.worker.http.connections import Connections
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.protocol import HttpProtocol
from gateway.worker.http.request import Request
from gateway.worker.http.router import Router

ROUNDS = 200  # loop turns without progress before the harness gives up waiting


@dataclass(frozen=True)
class Seen:
    method: str
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


@dataclass
class Outcome:
    requests: list[Seen] = field(default_factory=list)
    refusal: int | None = None  # the status of the server's own error answer
    written: bytes = b""
    closed: bool = False


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.paused = False
        self.closing = False

    def write(self, data: Any) -> None:
        self.written += data

    def writelines(self, data: Iterable[Any]) -> None:
        for piece in data:
            self.written += piece

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        pass

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default


async def serve_bytes(pieces: Iterable[bytes], limits: ClientLimits | None = None) -> Outcome:
    limits = limits or ClientLimits(min_body_rate=0)
    outcome = Outcome()

    async def record(request: Request, answer: Answer) -> None:
        body, more = b"", True
        while more:
            chunk, more = await request.read()
            body += chunk
        target = request.raw_path + (b"?" + request.query if request.query else b"")
        seen = Seen(request.method, target, tuple(request.headers), body)
        outcome.requests.append(seen)
        answer.send(200, b"", b"ok")

    protocol = HttpProtocol(Router(record), limits, Connections(limits), {})
    transport = FakeTransport()
    protocol.connection_made(transport)
    waiting = list(pieces)
    idle = 0
    while idle < ROUNDS:
        fed = False
        while waiting and not transport.paused and not transport.closing:
            protocol.data_received(waiting.pop(0))
            fed = True
        before = (len(transport.written), len(outcome.requests))
        await asyncio.sleep(0)
        progressed = fed or before != (len(transport.written), len(outcome.requests))
        idle = 0 if progressed else idle + 1
    outcome.written = bytes(transport.written)
    outcome.closed = transport.closing
    statuses = [int(s) for s in re.findall(rb"HTTP/1\.1 (\d{3}) [A-Z]", outcome.written)]
    if len(statuses) > len(outcome.requests):
        outcome.refusal = statuses[-1]
    protocol.connection_lost(None)
    return outcome

"""The upstream transport contract: one HTTP/1.1 exchange with one replica.

The transport is a small swappable object (as in httpx's ``BaseTransport``) so the hot path can use
the cheapest of the clients `loadtests/bench_transport.py` compares while tests and benchmarks swap
in others. A transport is the only place where a client library's exceptions become ours: it raises
`UpstreamConnectError`, `UpstreamTimeout` or `UpstreamProtocolError` and nothing else (but for
the `Overloaded` of an `AnswerRoom` that found no room for a reply's body).

A keep-alive connection is only as good as its stream is in step. Two rules keep one request's
bytes from being read as another's reply, where HTTP framing alone cannot tell:

- a reply its caller refuses as a protocol error (not a V2 reply, another request's ``id``) is
  `Reply.discard`-ed: the connection it came on is closed, so what the server still
  sends on it (the refused request's real answer, late) reaches nobody;
- control requests (GET and HEAD: health probes, metadata) and the others (POST: infer,
  golden probes) never share a connection: a late inference answer cannot pass for a health
  or metadata reply, which carries no ``id`` to catch it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.config.endpoint import Endpoint
from gateway.v2.body import Body


class Stream(Protocol):
    """Where a reply came from, as far as its caller may act on it."""

    def discard(self) -> None:
        """Close it: its stream is out of step and must carry no other exchange."""


@dataclass(slots=True)
class Reply:
    """A complete upstream reply. Header names are lower-case. ``stream``: the connection it
    came on (None where the transport keeps none, or lets its library pool them).

    One per reply and never written after: a plain slotted dataclass, as frozen construction
    costs a call per field (it holds a dict: not hashable either way)."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    stream: Stream | None = field(default=None, compare=False, repr=False)

    def discard(self) -> None:
        """The caller refuses this reply as a protocol error: close the connection it came on
        (never pooled again, idle or not), so the refused request's real answer, if the server
        sends it late, is read by no other exchange. Call it before the next ``await``: until
        then no other exchange can have taken the connection."""
        if self.stream is not None:
            self.stream.discard()


class AnswerRoom(Protocol):
    """Where a reply's body is held in memory before it is read (the request's share of
    ``server.inflight_bytes``: `gateway.pipeline.edge.Arrival`). A reply whose body stays within
    ``answer_free`` bytes asks nothing; a larger one asks for its Content-Length (or, without
    one, for what has arrived plus one read) before reading on: `hold_answer` now, else the
    connection stops reading while `wait_answer` waits. `Overloaded` from the wait fails the
    exchange and drops the connection, the body unread (the gateway's own shortage, never the
    replica's fault)."""

    # a body up to this size is read without asking
    answer_free: int

    def hold_answer(self, size: int) -> bool:
        """Room for ``size`` bytes of body now (True), or nothing changed (False)."""
        ...

    async def wait_answer(self, size: int) -> None:
        """Room for ``size`` bytes of body, waited for; `Overloaded` if it never comes."""
        ...


class Transport(Protocol):
    """Sends one request to one endpoint and returns the whole reply.

    ``timeout`` bounds the whole exchange (connect, send, wait, read) in seconds.
    ``headers`` are extra request headers (lower-case names); the transport adds Host and
    Content-Length itself. A transport that pools connections keeps those of GET and HEAD
    requests apart from the others, and closes a reply's connection on `discard`. ``room``:
    where the reply's body is held before it is read (`AnswerRoom`); a transport that reads
    replies whole may ignore it (the edge then counts the answer once it has it), and one that
    heeds it may also raise the room's `Overloaded`.
    """

    name: str

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        # a `Body` is sent as its pieces where the transport can
        body: bytes | Body = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Reply: ...

    def forget(self, endpoint: Endpoint) -> None:
        """The endpoint's replica left the gateway: release what is kept for it (idle
        connections); an exchange still in flight finishes. Nothing kept: nothing to do."""

    async def aclose(self) -> None: ...

"""The upstream transport contract: one HTTP/1.1 exchange with one replica.

The transport is a small swappable object (as in httpx's ``BaseTransport``) so the hot path can
use the fastest client measured on this machine while tests and benchmarks swap in others. A
transport is the only place where a client library's exceptions become ours: it raises
`UpstreamConnectError`, `UpstreamTimeout` or `UpstreamProtocolError` and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gateway.config.endpoint import Endpoint


@dataclass(frozen=True, slots=True)
class UpstreamResponse:
    """A complete upstream reply. Header names are lower-case."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class Transport(Protocol):
    """Sends one request to one endpoint and returns the whole reply.

    ``timeout`` bounds the whole exchange (connect, send, wait, read) in seconds.
    ``headers`` are extra request headers (lower-case names); the transport adds Host and
    Content-Length itself.
    """

    name: str

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
    ) -> UpstreamResponse: ...

    def forget(self, endpoint: Endpoint) -> None:
        """The endpoint's replica left the gateway: release what is kept for it (idle
        connections); an exchange still in flight finishes. Nothing kept: nothing to do."""

    async def aclose(self) -> None: ...

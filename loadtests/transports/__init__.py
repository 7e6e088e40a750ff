"""The upstream transports that `bench_transport.py` compares, by name, and their limits.

Why: the gateway always proxies with `Http1Transport`; aiohttp, httpx and httpx over aiohttp
are kept here, beside the benchmark, as the measured alternatives and as the reference
implementations that the transport contract tests (``tests/gateway/upstream``) hold it to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.http1 import Http1Transport
from gateway.upstream.transport.limits import (
    MAX_REPLY_BODY_BYTES,
    MAX_REPLY_HEADER_BYTES,
    MAX_REPLY_HEADER_COUNT,
)
from loadtests.transports.aiohttp_transport import AiohttpTransport
from loadtests.transports.httpx_aiohttp import AiohttpBackend
from loadtests.transports.httpx_transport import HttpxTransport


@dataclass(frozen=True, slots=True)
class TransportLimits:
    """Connection limits per replica endpoint, and caps on each reply (a replica is untrusted).

    A reply over a ``max_reply_*`` cap fails with `UpstreamProtocolError` naming the cap, and its
    connection is dropped. Only "fast" enforces those caps; the others use their libraries'
    own limits.
    """

    max_connections_per_endpoint: int = 256
    max_idle_per_endpoint: int = 64
    connect_timeout_s: float = 1.0
    max_reply_header_count: int = MAX_REPLY_HEADER_COUNT  # fields, interim replies included
    max_reply_header_bytes: int = MAX_REPLY_HEADER_BYTES
    max_reply_body_bytes: int = MAX_REPLY_BODY_BYTES  # the largest tensor reply relayed

    def __post_init__(self) -> None:
        if self.max_connections_per_endpoint < 1:
            raise ValueError("max_connections_per_endpoint must be at least 1")
        if self.max_idle_per_endpoint < 0:
            raise ValueError("max_idle_per_endpoint must not be negative")
        if self.connect_timeout_s <= 0:
            raise ValueError("connect_timeout_s must be positive")
        for cap in ("max_reply_header_count", "max_reply_header_bytes", "max_reply_body_bytes"):
            if getattr(self, cap) < 1:
                raise ValueError(f"{cap} must be at least 1")


def _fast(limits: TransportLimits) -> Transport:
    return Http1Transport(
        max_connections_per_endpoint=limits.max_connections_per_endpoint,
        max_idle_per_endpoint=limits.max_idle_per_endpoint,
        connect_timeout_s=limits.connect_timeout_s,
        max_reply_header_count=limits.max_reply_header_count,
        max_reply_header_bytes=limits.max_reply_header_bytes,
        max_reply_body_bytes=limits.max_reply_body_bytes,
    )


def _aiohttp(limits: TransportLimits) -> Transport:
    return AiohttpTransport(
        max_connections_per_endpoint=limits.max_connections_per_endpoint,
        max_idle_per_endpoint=limits.max_idle_per_endpoint,
        connect_timeout_s=limits.connect_timeout_s,
    )


def _httpx(limits: TransportLimits) -> Transport:
    return HttpxTransport(
        max_connections_per_endpoint=limits.max_connections_per_endpoint,
        max_idle_per_endpoint=limits.max_idle_per_endpoint,
        connect_timeout_s=limits.connect_timeout_s,
    )


def _httpx_aiohttp(limits: TransportLimits) -> Transport:
    backend = AiohttpBackend(max_connections_per_endpoint=limits.max_connections_per_endpoint)
    return HttpxTransport(
        connect_timeout_s=limits.connect_timeout_s, backend=backend, name="httpx-aiohttp"
    )


TRANSPORTS: dict[str, Callable[[TransportLimits], Transport]] = {
    "fast": _fast,
    "aiohttp": _aiohttp,
    "httpx": _httpx,
    "httpx-aiohttp": _httpx_aiohttp,
}


def make_transport(name: str, limits: TransportLimits | None = None) -> Transport:
    """The transport called ``name``, built with ``limits`` (the defaults when omitted)."""
    try:
        factory = TRANSPORTS[name]
    except KeyError:
        choices = ", ".join(repr(n) for n in TRANSPORTS)
        raise ValueError(f"unknown transport {name!r}; choose one of {choices}") from None
    return factory(limits or TransportLimits())

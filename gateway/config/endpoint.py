"""Where a replica listens, parsed once from its configured URL, and what every request carries.

It sits in the config package because the config validates replica URLs with it; the transports
below read it. Nothing here does I/O. An endpoint is the transport's key for its connection
pools, so its scheme and TLS settings are part of its identity (a TLS connection is never
reused for plaintext, nor one with another client certificate), and so is whether its
connections are kept alive at all; its pool's extra headers are not (they change what is sent,
not where).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

from gateway.config.headers import NO_HEADERS, ExtraHeaders
from gateway.config.tls import DEFAULT_TLS, TlsConfig
from gateway.redact import mask_url

# gRPC: Triton's port
DEFAULT_PORTS = {"http": 80, "https": 443, "grpc": 8001, "grpcs": 8001}
TLS_SCHEMES = frozenset({"https", "grpcs"})
GRPC_SCHEMES = frozenset({"grpc", "grpcs"})
Scheme = Literal["http", "https", "grpc", "grpcs"]


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a replica listens: scheme, host, port and an optional path prefix; for ``https``
    the pool's TLS settings, and the pool's extra headers.

    ``keep_alive`` False: every exchange gets a connection of its own, asks the server to close
    it (``Connection: close``) and is never pooled, for servers whose replies carry no request
    id: on a reused connection a late reply would be read as the next request's.
    ``fixed_head`` is the part of every request head that depends on the endpoint alone (Host,
    Connection and the extra headers), built once, and refused (ValueError) if a CR or LF in
    its host or headers would end a line early: the transport checks only the rest of
    each head. The hash is computed once too: the transport looks an endpoint up on every
    request (docs/measured.md).
    """

    host: str
    port: int
    prefix: str = ""
    # grpc, grpcs: the V2 gRPC protocol (`GrpcTransport`)
    scheme: Scheme = "http"
    # how to speak TLS; set exactly when the scheme is https/grpcs
    tls: TlsConfig | None = None
    headers: ExtraHeaders = field(default=NO_HEADERS, compare=False, repr=False)
    keep_alive: bool = True
    fixed_head: str = field(init=False, compare=False, repr=False)
    # Reached over V2 gRPC (grpc://, grpcs://) rather than REST: read on every exchange, so an
    # attribute set once, not a property
    is_grpc: bool = field(init=False, compare=False, repr=False)
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.tls is not None) != (self.scheme in TLS_SCHEMES):
            raise ValueError(
                "an endpoint has TLS settings exactly when its scheme is https or grpcs"
            )
        host = self.headers.host or self.authority
        close = "" if self.keep_alive else "connection: close\r\n"
        head = f"host: {host}\r\n{close}{self.headers.lines}"
        lines = 1 + (not self.keep_alive) + self.headers.count
        if head.count("\n") != lines or head.count("\r") != lines:
            raise ValueError("CR or LF in an endpoint's host or headers")
        object.__setattr__(self, "fixed_head", head)
        object.__setattr__(self, "is_grpc", self.scheme in GRPC_SCHEMES)
        key = (self.host, self.port, self.prefix, self.scheme, self.tls, self.keep_alive)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """An endpoint from ``http[s]://host[:port][/prefix]``; https gets default TLS settings
        (the system's CAs) until `with_pool` gives it the pool's."""
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            shown = mask_url(url)
            raise ValueError(
                f"replica url must be http://host:port[/prefix] or https://..., or "
                f"grpc://host:port or grpcs://host:port (V2 gRPC), got {shown!r}"
            )
        if parts.scheme in GRPC_SCHEMES and parts.path.strip("/"):
            raise ValueError(f"a {parts.scheme}:// replica url has no path, got {mask_url(url)!r}")
        if "@" in parts.netloc:
            # silently dropping them (as before) sent requests unauthenticated
            raise ValueError(
                f"replica url must not carry credentials (user:password@), got {mask_url(url)!r}: "
                "the gateway does not send them; set the pool's headers (e.g. Authorization) "
                "or put the replica behind a network boundary instead"
            )
        scheme: Scheme = parts.scheme  # type: ignore[assignment]  # one of DEFAULT_PORTS
        port = parts.port or DEFAULT_PORTS[scheme]
        tls = DEFAULT_TLS if scheme in TLS_SCHEMES else None
        return cls(parts.hostname, port, parts.path.rstrip("/"), scheme, tls)

    def with_pool(
        self, tls: TlsConfig | None, headers: ExtraHeaders, *, keep_alive: bool = True
    ) -> Endpoint:
        """This endpoint with its pool's TLS settings (https and grpcs only), extra headers and
        whether its connections are kept alive."""
        tls = (tls or self.tls) if self.scheme in TLS_SCHEMES else None
        return Endpoint(self.host, self.port, self.prefix, self.scheme, tls, headers, keep_alive)

    @property
    def authority(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def server_name(self) -> str:
        """The name sent as SNI and checked against the replica's certificate."""
        return (self.tls and self.tls.server_name) or self.host

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.prefix}"

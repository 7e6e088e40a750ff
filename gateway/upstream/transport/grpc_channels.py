"""One ``grpc.aio`` channel per gRPC replica, kept open, built from its endpoint.

A channel is one HTTP/2 connection (re-dialled by gRPC itself when it drops) on which every
call to the replica rides as its own stream, so no reply can be read as another call's: a
discarded reply needs no connection closed, unlike HTTP/1.1 keep-alive. What a channel must be
for the gateway, in one place:

- gRPC's own retries are off: the gateway's retry policy, budget and hedging decide alone;
- reconnects back off to at most a second (gRPC's default grows to minutes), so a
  restarted replica is seen by the next health probe, not minutes later;
- a reply larger than the gateway's reply cap fails at the channel (RESOURCE_EXHAUSTED, read
  as a protocol error), before it is ever held whole;
- ``grpcs://``: TLS from the pool's settings (`TlsConfig`: CA, client certificate for mTLS,
  SNI name); gRPC cannot turn verification off, so ``verify: false`` is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
import grpc.aio

from gateway.config.endpoint import Endpoint
from gateway.config.tls import TlsConfig
from gateway.errors import UpstreamConnectError
from v2proto.grpc.service import Stub

# the gateway's own body limits bound what it sends
MAX_SEND_BYTES = 1 << 30


@dataclass(frozen=True, slots=True)
class Channel:
    channel: grpc.aio.Channel
    stub: Stub
    # the pool's extra headers, as call metadata
    metadata: tuple[tuple[str, str], ...]


def channel_options(endpoint: Endpoint, max_reply_bytes: int) -> list[tuple[str, str | int]]:
    options: list[tuple[str, str | int]] = [
        ("grpc.enable_retries", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.max_receive_message_length", max_reply_bytes),
        ("grpc.max_send_message_length", MAX_SEND_BYTES),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_permit_without_calls", 0),
    ]
    if endpoint.headers.host:
        options.append(("grpc.default_authority", endpoint.headers.host))
    if endpoint.tls is not None and endpoint.tls.server_name:
        options.append(("grpc.ssl_target_name_override", endpoint.tls.server_name))
    return options


def credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    """Channel credentials for ``tls``; `UpstreamConnectError` naming a file it cannot read."""
    if not tls.verify:
        raise UpstreamConnectError("tls.verify: false is not possible for grpcs:// replicas")
    try:
        ca = _read(tls.ca_file)
        cert = _read(tls.cert_file)
        key = _read(tls.key_file) if tls.key_file else cert if cert else None
    except OSError as exc:
        files = ", ".join(f for f in (tls.ca_file, tls.cert_file, tls.key_file) if f)
        raise UpstreamConnectError(f"cannot load the TLS files ({files}): {exc}") from exc
    return grpc.ssl_channel_credentials(ca, key, cert)


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        return f.read()


def metadata_of(endpoint: Endpoint) -> tuple[tuple[str, str], ...]:
    """The pool's extra headers (but Host, which is the channel's authority) as metadata."""
    pairs = []
    for line in endpoint.headers.lines.split("\r\n"):
        name, sep, value = line.partition(": ")
        if sep:
            pairs.append((name.lower(), value))
    return tuple(pairs)


def open_channel(endpoint: Endpoint, max_reply_bytes: int) -> Channel:
    """A channel to ``endpoint`` (it connects on its first call)."""
    target = endpoint.authority
    options = channel_options(endpoint, max_reply_bytes)
    if endpoint.tls is None:
        channel = grpc.aio.insecure_channel(target, options=options)
    else:
        channel = grpc.aio.secure_channel(target, credentials(endpoint.tls), options=options)
    return Channel(channel, Stub(channel), metadata_of(endpoint))

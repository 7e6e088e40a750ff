"""The gRPC door's own limits: what grpc's HTTP/2 server enforces per connection and stream.

The memory bound across requests is ``server.inflight_bytes`` for every door; these settings
bound what grpc itself holds before a message reaches the door (a stream's receive window, the
streams of one connection) and how long a connection may sit idle, and keep a client from
pinging the server busy. They are read when the server starts (a restart changes them).
"""

from __future__ import annotations

from pydantic import Field

from gateway.frozen import Frozen


class GrpcDoorConfig(Frozen):
    """HTTP/2 and gRPC server settings of the V2 gRPC service (``server.grpc_port``)."""

    max_concurrent_streams: int = Field(
        100,
        ge=1,
        le=1_000_000,
        description="streams (calls) one connection may have open at once "
        "(SETTINGS_MAX_CONCURRENT_STREAMS, grpc.max_concurrent_streams); a client's next "
        "call waits for one to end",
    )
    stream_window_bytes: int = Field(
        64 * 1024,
        ge=16 * 1024,
        le=16 * 1024 * 1024,
        description="what a stream may send before the door reads its message "
        "(grpc.http2.lookahead_bytes, with grpc's BDP window growth off): the most grpc "
        "holds of a call that waits for its share of server.inflight_bytes",
    )
    stream_answers: int = Field(
        64,
        ge=1,
        le=4096,
        description="ModelStreamInfer: requests of one stream served or answered-but-unsent "
        "at once; past it the stream's next request is not read until an answer is written "
        "(a client that stops reading stops its own requests, in HTTP/2 flow control)",
    )
    min_ping_interval_s: float = Field(
        20.0,
        gt=0,
        description="the shortest interval between a client's keepalive pings "
        "(grpc.http2.min_ping_interval_without_data_ms); a ping sooner is a strike",
    )
    max_ping_strikes: int = Field(
        2,
        ge=0,
        description="pings too soon before the connection is closed with GOAWAY "
        "(ENHANCE_YOUR_CALM; grpc.http2.max_ping_strikes, 0: no limit)",
    )
    max_connection_idle_s: float | None = Field(
        300.0,
        gt=0,
        description="a connection with no call open this long is closed with GOAWAY "
        "(grpc.max_connection_idle_ms; None: never)",
    )
    max_connection_age_s: float | None = Field(
        None,
        gt=0,
        description="a connection older than this is told to go (GOAWAY), its calls "
        "finished within max_connection_age_grace_s (grpc.max_connection_age_ms; None: never)",
    )
    max_connection_age_grace_s: float = Field(
        30.0, ge=0, description="how long calls of a connection past its age may still run"
    )

    def server_options(self) -> list[tuple[str, int]]:
        """These settings as grpc server options."""
        options = [
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            # the window stays what it is set to
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", self.stream_window_bytes),
            ("grpc.http2.min_ping_interval_without_data_ms", _ms(self.min_ping_interval_s)),
            ("grpc.http2.max_ping_strikes", self.max_ping_strikes),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        if self.max_connection_idle_s is not None:
            options.append(("grpc.max_connection_idle_ms", _ms(self.max_connection_idle_s)))
        if self.max_connection_age_s is not None:
            options.append(("grpc.max_connection_age_ms", _ms(self.max_connection_age_s)))
            grace = _ms(self.max_connection_age_grace_s)
            options.append(("grpc.max_connection_age_grace_ms", grace))
        return options


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))

"""`server.grpc`: typed, bounded, and turned into the grpc server options it names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config.grpc_door import GrpcDoorConfig
from gateway.config.server import ServerConfig


def test_the_defaults_bound_streams_windows_pings_and_idle_connections() -> None:
    options = dict(ServerConfig().grpc.server_options())
    assert options == {
        "grpc.max_concurrent_streams": 100,
        "grpc.http2.bdp_probe": 0,
        "grpc.http2.lookahead_bytes": 64 * 1024,
        "grpc.http2.min_ping_interval_without_data_ms": 20_000,
        "grpc.http2.max_ping_strikes": 2,
        "grpc.keepalive_permit_without_calls": 1,
        "grpc.max_connection_idle_ms": 300_000,
    }


def test_a_connection_age_comes_with_its_grace_and_idle_can_be_off() -> None:
    config = GrpcDoorConfig(max_connection_age_s=600, max_connection_idle_s=None)
    options = dict(config.server_options())
    assert options["grpc.max_connection_age_ms"] == 600_000
    assert options["grpc.max_connection_age_grace_ms"] == 30_000
    assert "grpc.max_connection_idle_ms" not in options


@pytest.mark.parametrize(
    "bad",
    [
        {"max_concurrent_streams": 0},
        {"stream_window_bytes": 1024},
        {"stream_answers": 0},
        {"min_ping_interval_s": 0},
        {"typo": 1},
    ],
)
def test_out_of_range_or_unknown_settings_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValidationError):
        GrpcDoorConfig(**bad)

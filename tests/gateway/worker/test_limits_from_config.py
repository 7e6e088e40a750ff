"""A worker's REST door takes its client limits from the config's ``server`` section."""

from __future__ import annotations

from gateway.worker.main import _client_limits
from tests.gateway.conftest import make_config


def test_the_cap_per_address_is_the_configs_whole_value_on_each_worker() -> None:
    config = make_config()
    assert _client_limits(config).max_connections_per_peer == 256  # the default
    update = {"server": config.server.model_copy(update={"max_connections_per_peer": 3})}
    assert _client_limits(config.model_copy(update=update)).max_connections_per_peer == 3
    update = {"server": config.server.model_copy(update={"max_connections_per_peer": None})}
    assert _client_limits(config.model_copy(update=update)).max_connections_per_peer is None

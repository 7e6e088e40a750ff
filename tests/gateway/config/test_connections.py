"""``server.max_connections``: set, or derived from the file-descriptor limit, leaving room for
the process itself and for what the pools may open to their replicas."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.config.connections import (
    CONTROL_CONNECTIONS,
    FIXED_RESERVE,
    MAX_DEFAULT,
    MIN_DEFAULT,
    default_connections,
    door_connections,
    fd_limit,
    upstream_connections,
)
from tests.gateway.conftest import make_config


def test_a_configured_cap_is_taken_as_it_is() -> None:
    config = make_config()
    server = config.server.model_copy(update={"max_connections": 300})
    assert door_connections(config.model_copy(update={"server": server}), 1_024) == 300


def test_the_default_leaves_the_process_and_the_replicas_their_descriptors() -> None:
    config = make_config(replicas=3)  # 3 replicas, 256 connections each by default
    upstream = 3 * (256 + CONTROL_CONNECTIONS)
    assert upstream_connections(config) == upstream
    nofile = 8_192
    per_door = (nofile - FIXED_RESERVE - upstream) // 2
    assert door_connections(config, nofile) == per_door
    assert 2 * per_door + upstream + FIXED_RESERVE <= nofile


def test_at_a_soft_limit_of_1024_the_pools_get_at_most_half_of_what_is_left() -> None:
    """The limit many services start with: the doors together never take more than the pools'
    half of what is left after the process's own descriptors."""
    config = make_config(replicas=8)
    spare = 1_024 - FIXED_RESERVE
    per_door = default_connections(config, 1_024)
    assert per_door == (spare - spare // 2) // 2
    assert 2 * per_door <= spare - spare // 2


def test_the_default_stays_within_its_bounds() -> None:
    config = make_config()
    assert default_connections(config, 64) == MIN_DEFAULT  # a tiny limit: still some
    assert default_connections(config, 1 << 30) == MAX_DEFAULT  # a huge one: bounded


def test_a_discovered_pool_counts_as_many_replicas_as_it_may_make() -> None:
    discovery = {"dns": "m.ns.svc", "port": 8080, "max_members": 10}
    pools = {"p": {"model": "m", "discovery": discovery}}
    config = parse_config({"pools": pools, "models": {"d": {"pool": "p"}}})
    assert upstream_connections(config) == 10 * (256 + CONTROL_CONNECTIONS)


def test_the_process_limit_is_read_now() -> None:
    assert fd_limit() >= 1


@pytest.mark.parametrize("value", [0, -1])
def test_a_cap_below_one_is_refused(value: int) -> None:
    pools = {"p": {"model": "m", "replicas": [{"id": "a", "url": "http://h:1"}]}}
    data = {"server": {"max_connections": value}, "pools": pools, "models": {"d": {"pool": "p"}}}
    with pytest.raises(ConfigError, match="max_connections"):
        parse_config(data)

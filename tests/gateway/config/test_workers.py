"""``server.workers``: a count from 1 to 1024 or ``auto``, 1 by default; anything else is
refused with the key named and the values it takes."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import ConfigError, parse_config


def config(**server: Any) -> dict[str, Any]:
    replicas = [{"id": "r0", "url": "http://127.0.0.1:9000"}]
    return {
        "server": server,
        "pools": {"p": {"model": "m", "replicas": replicas}},
        "models": {"m": {"pool": "p"}},
    }


def test_one_worker_by_default() -> None:
    assert parse_config(config()).server.workers == 1


@pytest.mark.parametrize("workers", [1, 16, 1024, "auto"])
def test_a_count_or_auto(workers: int | str) -> None:
    assert parse_config(config(workers=workers)).server.workers == workers


@pytest.mark.parametrize("workers", [0, -2, 1025, "2", 2.0, True, "all", None])
def test_anything_else_is_refused(workers: object) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(config(workers=workers))
    assert f"server.workers: a count from 1 to 1024, or 'auto'; not {workers!r}" in str(
        refused.value
    )

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config, parse_config

GOOD = {
    "pools": {"p": {"model": "m", "replicas": [{"id": "a", "url": "http://127.0.0.1:1"}]}},
    "models": {"d": {"pool": "p"}},
}


def test_local_config_is_valid() -> None:
    config = load_config(Path(__file__).parents[3] / "config" / "local.yaml")
    assert config.models["digits"].pool == "digits-mlp"
    assert len(config.pools["digits-mlp"].replicas) == 3


def test_unknown_pool_is_named() -> None:
    with pytest.raises(ConfigError, match=r"models\.d\.pool: unknown pool 'q'"):
        parse_config({**GOOD, "models": {"d": {"pool": "q"}}})


def test_unknown_key_is_named() -> None:
    bad = {**GOOD, "server": {"prot": 1}}
    with pytest.raises(ConfigError, match=r"server\.prot: Extra inputs are not permitted"):
        parse_config(bad)


def test_bad_url_is_named() -> None:
    pools = {"p": {"model": "m", "replicas": [{"id": "a", "url": "ftp://x"}]}}
    with pytest.raises(ConfigError, match=r"pools\.p\.replicas\.0\.url"):
        parse_config({**GOOD, "pools": pools})


def test_duplicate_replica_ids_rejected() -> None:
    replica = {"id": "a", "url": "http://127.0.0.1:1"}
    pools = {"p": {"model": "m", "replicas": [replica, replica]}}
    with pytest.raises(ConfigError, match="duplicate replica id 'a'"):
        parse_config({**GOOD, "pools": pools})


def test_config_is_frozen() -> None:
    config = parse_config(GOOD)
    with pytest.raises(ValueError):
        config.server.port = 1  # type: ignore[misc]


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_timeout_over_cap_rejected() -> None:
    with pytest.raises(ConfigError, match="timeout_ms must not exceed max_timeout_ms"):
        parse_config(
            {**GOOD, "models": {"d": {"pool": "p", "timeout_ms": 10, "max_timeout_ms": 5}}}
        )

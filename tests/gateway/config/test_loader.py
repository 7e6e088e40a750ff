from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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


def test_unknown_key_is_named_with_the_closest_known_key() -> None:
    bad = {**GOOD, "server": {"prot": 1}}
    with pytest.raises(ConfigError, match=r"server\.prot: unknown key \(did you mean 'port'\?\)"):
        parse_config(bad)


@pytest.mark.parametrize(
    ("where", "typo", "meant"),
    [
        ((), "sever", "server"),
        (("pools", "p"), "helth", "health"),
        (("pools", "p", "replicas", 0), "zoen", "zone"),
        (("models", "d"), "timout_ms", "timeout_ms"),
        (("models", "d", "fallback"), "modle", "model"),
        (("state",), "redis_ulr", "redis_url"),
    ],
)
def test_a_typo_anywhere_gets_did_you_mean(
    where: tuple[str | int, ...], typo: str, meant: str
) -> None:
    data = {**GOOD, "models": {"d": {"pool": "p", "fallback": {"model": "digits-logreg"}}}}
    data = yaml.safe_load(yaml.safe_dump(data))
    node = data
    for part in where:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[typo] = 1
    dotted = ".".join(str(p) for p in (*where, typo))
    with pytest.raises(ConfigError) as bad:
        parse_config(data)
    assert f"{dotted}: unknown key (did you mean {meant!r}?)" in str(bad.value)


def test_a_key_like_none_known_gets_no_suggestion() -> None:
    with pytest.raises(ConfigError) as bad:
        parse_config({**GOOD, "server": {"xyzzy": 1}})
    assert str(bad.value).endswith("server.xyzzy: unknown key")


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

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway.config import ConfigError, load_config, parse_config
from gateway.upstream.transport.limits import DEFAULT_LIMITS

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


def test_the_upstream_limits_once_under_server_are_read_there_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert parse_config(GOOD).upstream.max_reply_header_count == 100
    with caplog.at_level("WARNING", logger="gateway.config.upstream"):
        old = parse_config(
            {
                **GOOD,
                "server": {
                    "max_reply_headers": 7,
                    "port": 8080,
                    "max_connections_per_replica": 9,
                    "max_reply_body_bytes": 1024,
                },
            }
        )
    assert old.upstream.max_reply_header_count == 7
    assert old.upstream.max_connections_per_replica == 9
    assert old.upstream.max_reply_body_bytes == 1024 and old.server.port == 8080
    assert "server.max_reply_headers is deprecated: it is upstream.max_reply_header_count" in (
        caplog.text
    )
    assert "server.max_reply_body_bytes is deprecated" in caplog.text
    new = parse_config({**GOOD, "upstream": {"max_reply_header_bytes": 4096}})
    assert new.upstream.max_reply_header_bytes == 4096
    both_names = {**GOOD, "server": {"max_reply_headers": 7, "max_reply_header_count": 9}}
    with pytest.raises(ConfigError, match=r"server\.max_reply_header_count and server\.max_r"):
        parse_config(both_names)
    both_places = {
        **GOOD,
        "server": {"max_reply_body_bytes": 7},
        "upstream": {"max_reply_body_bytes": 9},
    }
    with pytest.raises(ConfigError, match=r"keep upstream\.max_reply_body_bytes"):
        parse_config(both_places)
    with pytest.raises(ConfigError, match="max_reply_headers"):  # the new section: new names
        parse_config({**GOOD, "upstream": {"max_reply_headers": 7}})


def test_parse_workers_is_read_as_parse_processes_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert parse_config(GOOD).server.parse_processes == 1
    with caplog.at_level("WARNING", logger="gateway.config.server"):
        old = parse_config({**GOOD, "server": {"parse_workers": 3, "port": 8080}})
    assert old.server.parse_processes == 3 and old.server.port == 8080
    assert "server.parse_workers is deprecated: it is server.parse_processes now" in caplog.text
    assert parse_config({**GOOD, "server": {"parse_processes": 2}}).server.parse_processes == 2
    with pytest.raises(ConfigError, match=r"keep server\.parse_processes"):
        parse_config({**GOOD, "server": {"parse_workers": 2, "parse_processes": 3}})


def test_a_transport_built_alone_caps_replies_as_the_config_does() -> None:
    upstream = parse_config(GOOD).upstream
    assert DEFAULT_LIMITS.max_reply_body_bytes == upstream.max_reply_body_bytes
    assert DEFAULT_LIMITS.max_reply_header_bytes == upstream.max_reply_header_bytes
    assert DEFAULT_LIMITS.max_reply_header_count == upstream.max_reply_header_count

"""The state URL forms: one Redis, a Redis Cluster, Sentinel; parsed without connecting."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gateway.config.loader import ConfigError, parse_config
from gateway.state.redis_store import RedisStore
from gateway.state.redis_url import parse


def test_a_plain_url_is_one_redis_as_before() -> None:
    target = parse("redis://:pw@127.0.0.1:6379/2")
    assert (target.mode, target.tls, target.nodes) == ("single", False, ())
    assert parse("rediss://h:6380/0").tls


def test_a_cluster_url_lists_its_start_nodes() -> None:
    target = parse("rediss+cluster://user:s3cret@10.0.0.1:7000, 10.0.0.2:7001,[::1]:7002")
    assert target.mode == "cluster" and target.tls
    assert target.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002))
    assert (target.username, target.password) == ("user", "s3cret")
    assert "s3cret" not in repr(target)


def test_a_sentinel_url_names_the_sentinels_the_primary_and_the_database() -> None:
    target = parse("redis+sentinel://:pw@s1:26379,s2:26379/gwstate/3")
    assert target.mode == "sentinel"
    assert target.nodes == (("s1", 26379), ("s2", 26379))
    assert (target.master_name, target.db, target.username, target.password) == (
        "gwstate",
        3,
        None,
        "pw",
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://h:1",
        "redis+cluster://",
        "redis+cluster://:pw@h",
        "redis+cluster://:pw@h:1/2",
        "redis+sentinel://:pw@h:26379",
        "redis+sentinel://:pw@h:26379/m/x",
    ],
)
def test_a_malformed_url_is_refused_without_quoting_its_password(url: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse(url)
    assert "pw" not in str(refused.value)


def _config(**state: str) -> dict[str, Any]:
    return {
        "pools": {"p": {"model": "m", "replicas": [{"id": "r0", "url": "http://127.0.0.1:9"}]}},
        "models": {"m": {"pool": "p"}},
        "state": {"backend": "redis", **state},
    }


def test_the_config_checks_the_url_and_the_namespace() -> None:
    config = parse_config(_config(redis_url="redis+cluster://h:7000", namespace="fleet-a"))
    assert config.state.namespace == "fleet-a"
    with pytest.raises(ConfigError, match=r"state\.redis_url") as bad:
        parse_config(_config(redis_url="redis+cluster://:hunter2@h"))
    assert "hunter2" not in str(bad.value)
    with pytest.raises(ConfigError, match=r"state\.namespace"):
        parse_config(_config(namespace="a}b"))


async def test_the_store_shows_the_mode_and_masks_the_password() -> None:
    store = RedisStore("redis+sentinel://:hunter2@127.0.0.1:1/gwstate", namespace="fleet")
    shown = store.describe()
    await store.close()
    assert shown["mode"] == "sentinel" and shown["namespace"] == "fleet"
    assert "hunter2" not in str(shown) and "***" in shown["url"]


def test_a_url_names_its_password_as_a_variable_read_at_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "redis://:${GW_TEST_REDIS_PW}@redis.v2-gateway.svc:6379/0"
    monkeypatch.setenv("GW_TEST_REDIS_PW", "hunter2")
    state = parse_config(_config(redis_url=url)).state
    assert state.redis_url == url  # the config keeps the reference, not the secret
    assert state.url({"GW_TEST_REDIS_PW": "hunter2"}) == (
        "redis://:hunter2@redis.v2-gateway.svc:6379/0"
    )
    cluster = "redis+cluster://:${GW_TEST_REDIS_PW}@${GW_TEST_REDIS_HOST}:7000"
    monkeypatch.setenv("GW_TEST_REDIS_HOST", "10.0.0.1")
    assert parse(parse_config(_config(redis_url=cluster)).state.url(os.environ)).nodes == (
        ("10.0.0.1", 7000),
    )


def test_an_unset_variable_in_the_url_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GW_TEST_REDIS_PW", raising=False)
    with pytest.raises(ConfigError) as bad:
        parse_config(_config(redis_url="redis://:${GW_TEST_REDIS_PW}@h:6379/0"))
    assert "state.redis_url: environment variable GW_TEST_REDIS_PW is not set" in str(bad.value)

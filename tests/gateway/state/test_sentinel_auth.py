"""The sentinels' password in the config: where it comes from, what is refused, what is shown.

Fast, no network: the config keys (``state.sentinel_password_env`` / ``_file``,
``sentinel_username``), the errors at load and in `config_problems` (naming the key and the
source, never the value), and the masked forms. The real sentinels are in
`test_redis_topologies`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.loader import ConfigError, load_config, parse_config
from gateway.control.preflight import config_problems
from gateway.state.redis_store import RedisStore
from gateway.state.redis_target import connect
from gateway.state.redis_url import parse
from gateway.state.sentinel_auth import SentinelAuth

SECRET = "s3ntinel-Pa55"
URL = "redis+sentinel://:data-Pa55@127.0.0.1:1,127.0.0.1:2/gwstate"


def _config(**state: Any) -> dict[str, Any]:
    return {
        "pools": {"p": {"model": "m", "replicas": [{"id": "r0", "url": "http://127.0.0.1:9"}]}},
        "models": {"m": {"pool": "p"}},
        "state": {"backend": "redis", "redis_url": URL, **state},
    }


def test_no_sentinel_password_is_the_default() -> None:
    assert parse_config(_config()).state.sentinel_auth({}) is None


def test_the_password_comes_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GW_SENTINEL_PW", SECRET)
    state = parse_config(_config(sentinel_password_env="GW_SENTINEL_PW")).state
    auth = state.sentinel_auth({"GW_SENTINEL_PW": SECRET})
    assert auth == SentinelAuth(SECRET)
    assert auth.kwargs() == {"password": SECRET}
    assert SECRET not in repr(auth) and SECRET not in repr(state)


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_or_empty_variable_is_refused_at_load(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("GW_SENTINEL_PW", raising=False)
    else:
        monkeypatch.setenv("GW_SENTINEL_PW", value)
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(sentinel_password_env="GW_SENTINEL_PW"))
    assert "state: sentinel_password_env: environment variable GW_SENTINEL_PW is" in str(
        refused.value
    )


def test_the_file_is_beside_the_config_and_its_newline_is_not_the_password(
    tmp_path: Path,
) -> None:
    (tmp_path / "sentinel.pw").write_text(SECRET + "\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        yaml.safe_dump(_config(sentinel_password_file="sentinel.pw", sentinel_username="gw"))
    )
    config = load_config(path)
    assert config.state.sentinel_password_file == str(tmp_path / "sentinel.pw")
    assert config.state.sentinel_auth({}) == SentinelAuth(SECRET, "gw")
    assert config_problems(config) == []


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot read {path}: No such file or directory"),
        ("dir", "cannot read {path}: Is a directory"),
        ("", "{path} is empty"),
        (f"{SECRET}\nsecond line\n", "{path} holds more than one line"),
    ],
)
def test_a_file_that_cannot_give_the_password_is_a_named_problem(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    path = tmp_path / "sentinel.pw"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    config = parse_config(_config(sentinel_password_file=str(path)))
    problems = config_problems(config)
    assert problems == ["state.sentinel_password_file: " + problem.format(path=path)]
    assert SECRET not in str(problems)


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (
            {"sentinel_password_env": "A", "sentinel_password_file": "/f"},
            "give one of sentinel_password_env and sentinel_password_file",
        ),
        (
            {"redis_url": "redis://:data-Pa55@h:6379/0", "sentinel_password_env": "HOME"},
            "a sentinel password needs a redis+sentinel:// redis_url",
        ),
        (
            {"sentinel_username": "gw"},
            "sentinel_username needs sentinel_password_env or sentinel_password_file",
        ),
    ],
)
def test_credentials_the_sentinels_cannot_be_given_are_refused(
    state: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(_config(**state))
    assert f"state: {message}" in str(refused.value)
    assert "data-Pa55" not in str(refused.value)


async def test_the_store_shows_that_sentinels_have_a_password_but_not_which() -> None:
    store = RedisStore(URL, namespace="fleet", sentinel_auth=SentinelAuth(SECRET, "gw"))
    shown = store.describe()
    await store.close()
    assert shown["sentinel_auth"] == {"username": "gw", "password": "***"}
    assert SECRET not in str(shown) and "data-Pa55" not in str(shown)
    plain = RedisStore(URL, namespace="fleet")
    assert plain.describe()["sentinel_auth"] is None
    await plain.close()


def test_only_a_sentinel_target_takes_sentinel_credentials() -> None:
    with pytest.raises(ValueError, match="redis\\+sentinel://"):
        connect(parse("redis+cluster://h:7000"), SentinelAuth(SECRET))

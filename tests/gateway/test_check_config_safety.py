"""`gateway check-config` warns of shared state that anyone on the network could rewrite: a
Redis beyond loopback reached without a password or without TLS; ``--strict`` refuses it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.cli import main
from gateway.cli.check import redis_warnings
from gateway.config import parse_config

POOLS = "pools: {p: {model: m, replicas: [{id: a, url: 'http://127.0.0.1:1'}]}}\n"
MODELS = "models: {d: {pool: p}}\n"


def _config(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(f"state: {{backend: redis, redis_url: '{url}'}}\n{POOLS}{MODELS}")
    return path


def test_a_remote_redis_without_password_or_tls_is_warned_of_and_refused_when_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, "redis://redis.internal:6379/0")
    assert main(["check-config", str(path)]) == 0
    captured = capsys.readouterr()
    assert "ok (1 models, 1 pools, 1 replicas; 2 warning(s))" in captured.out
    assert "warning: state.redis_url: Redis at redis.internal is reached without a password" in (
        captured.err
    )
    assert "redis.internal is reached without TLS" in captured.err
    assert main(["check-config", str(path), "--strict"]) == 2
    err = capsys.readouterr().err
    assert "invalid (2 problem(s))" in err and "warning:" not in err


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("redis://redis.internal:6379/0", ["password", "TLS"]),
        ("redis://:${REDIS_PASSWORD}@redis.internal:6379/0", ["TLS"]),
        ("redis://user:${REDIS_PASSWORD}@10.0.0.5:6379/0", ["TLS"]),
        ("redis://just-a-user@redis.internal:6379/0", ["password", "TLS"]),  # no AUTH sent
        ("rediss://redis.internal:6379/0", ["password"]),
        ("rediss://:${REDIS_PASSWORD}@redis.internal:6379/0", []),
        ("rediss://redis.internal:6379/0?password=${REDIS_PASSWORD}", []),
        ("redis+cluster://10.0.0.1:7000,10.0.0.2:7000", ["password", "TLS"]),
        ("rediss+cluster://:${REDIS_PASSWORD}@10.0.0.1:7000,10.0.0.2:7000", []),
        ("redis+sentinel://:${REDIS_PASSWORD}@s1:26379,s2:26379/primary/0", ["TLS"]),
        ("redis://127.0.0.1:6379/0", []),  # this machine only
        ("redis://localhost:6379/0", []),
        ("redis://[::1]:6379/0", []),
        ("unix:///run/redis.sock", []),
    ],
)
def test_what_is_warned_of(url: str, warned: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", "p" * 24)
    data: dict[str, Any] = {"state": {"backend": "redis", "redis_url": url}}
    data |= {"pools": {"p": {"model": "m", "replicas": [{"id": "a", "url": "http://h:1"}]}}}
    warnings = redis_warnings(parse_config({**data, "models": {"d": {"pool": "p"}}}))
    said = ["password" if "without a password" in w else "TLS" for w in warnings]
    assert said == warned, warnings


def test_a_password_from_an_empty_variable_is_no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_PASSWORD", "")
    url = "rediss://:${REDIS_PASSWORD}@redis.internal:6379/0"
    data: dict[str, Any] = {"state": {"backend": "redis", "redis_url": url}}
    data |= {"pools": {"p": {"model": "m", "replicas": [{"id": "a", "url": "http://h:1"}]}}}
    (warning,) = redis_warnings(parse_config({**data, "models": {"d": {"pool": "p"}}}))
    assert "without a password" in warning


def test_the_memory_backend_is_never_warned_of() -> None:
    data = {"pools": {"p": {"model": "m", "replicas": [{"id": "a", "url": "http://h:1"}]}}}
    assert redis_warnings(parse_config({**data, "models": {"d": {"pool": "p"}}})) == []

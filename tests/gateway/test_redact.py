"""Secrets masked in URLs, and refused in replica URLs with the key named."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.redact import mask_url, scrub, url_secrets


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:pw-1@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://user:pw-1@h/0", "redis://user:***@h/0"),
        ("redis://pw-1@h/0", "redis://***@h/0"),
        ("redis://h/0?password=pw-2&db=1", "redis://h/0?password=***&db=1"),
        ("rediss://u:pw-1@h/0?PASSWORD=pw-2", "rediss://u:***@h/0?PASSWORD=***"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    for secret in url_secrets(url):
        assert secret not in masked


def test_url_secrets_include_the_encoded_and_decoded_forms() -> None:
    secrets = url_secrets("redis://:p%40ss-word@h/0?password=a%20b")
    assert set(secrets) == {"p%40ss-word", "p@ss-word", "a%20b", "a b"}
    assert scrub("auth p@ss-word failed; a%20b", secrets) == "auth *** failed; ***"


@pytest.mark.parametrize(
    "url", ["http://user:Hunter2-Secret@10.0.0.1:8080", "https://u:Hunter2-Secret@x"]
)
def test_a_replica_url_with_credentials_is_refused_without_showing_them(url: str) -> None:
    data = {
        "pools": {"p": {"model": "m", "replicas": [{"id": "a", "url": url}]}},
        "models": {"d": {"pool": "p"}},
    }
    with pytest.raises(ConfigError, match=r"pools\.p\.replicas\.0\.url") as refused:
        parse_config(data)
    assert "Hunter2-Secret" not in str(refused.value)

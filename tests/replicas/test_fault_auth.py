"""Where the fault key comes from, and that only its digest is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicas.fault_auth import (
    FAULT_KEY_ENV,
    MIN_KEY_CHARS,
    FaultKey,
    FaultKeyError,
    load_fault_key,
)


def test_only_the_digest_is_kept() -> None:
    key = FaultKey("s3cret-value-0123456")
    assert key.matches("s3cret-value-0123456") and not key.matches("s3cret-value-012345")
    assert "s3cret" not in repr(key)
    assert not hasattr(key, "__dict__")  # __slots__: nothing but the digest
    assert all("s3cret" not in repr(getattr(key, name)) for name in FaultKey.__slots__)


def test_the_file_wins_over_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("from-file-0123456789\n")
    environ = {FAULT_KEY_ENV: "from-env-0123456789"}
    key = load_fault_key(path, environ)
    assert key.matches("from-file-0123456789") and not key.matches("from-env-0123456789")
    assert FAULT_KEY_ENV not in environ  # the plain key does not linger in the environment


def test_the_environment_is_used_without_a_file() -> None:
    environ = {FAULT_KEY_ENV: " from-env-0123456789 \n", "OTHER": "x"}
    assert load_fault_key(None, environ).matches("from-env-0123456789")
    assert environ == {"OTHER": "x"}


@pytest.mark.parametrize("value", [None, "", "  \n"])
def test_no_key_anywhere_says_how_to_give_one(value: str | None) -> None:
    environ = {} if value is None else {FAULT_KEY_ENV: value}
    with pytest.raises(FaultKeyError, match=f"set {FAULT_KEY_ENV} or pass --fault-key-file"):
        load_fault_key(None, environ)


def test_an_empty_or_missing_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(FaultKeyError, match="is empty"):
        load_fault_key(tmp_path / "empty", {FAULT_KEY_ENV: "ignored"})
    with pytest.raises(FaultKeyError, match="cannot read --fault-key-file"):
        load_fault_key(tmp_path / "missing", {})


def test_a_key_shorter_than_the_gateways_minimum_is_refused(tmp_path: Path) -> None:
    assert MIN_KEY_CHARS == 16  # as the gateway's admin and tenant keys
    FaultKey("k" * 16)
    with pytest.raises(FaultKeyError, match="15 characters; it needs at least 16"):
        FaultKey("k" * 15)
    (tmp_path / "short").write_text("hunter2\n")
    with pytest.raises(FaultKeyError, match="at least 16"):
        load_fault_key(tmp_path / "short", {})
    with pytest.raises(FaultKeyError, match="at least 16"):
        load_fault_key(None, {FAULT_KEY_ENV: "hunter2"})

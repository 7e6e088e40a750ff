"""Named admin keys: each operator's keys open the admin gate and say who holds them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.api.auth import ControlAccess, Gate
from gateway.config import ConfigError
from gateway.config.access import AdminAccessConfig

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdefgh"
LEGACY = "legacy-key-0123456789abcdef"


def bearer(key: str) -> bytes:
    return f"Bearer {key}".encode()


def test_each_key_is_known_by_its_operators_name(tmp_path: Path) -> None:
    keys = tmp_path / "bob.keys"
    keys.write_text(f"# bob's keys\n{BOB}\n")
    config = AdminAccessConfig.model_validate(
        {
            "key_env": "OLD",
            "operators": {"alice": {"key_env": "ALICE_KEY"}, "bob": {"key_file": str(keys)}},
        }
    )
    access = ControlAccess.load(config, "0.0.0.0", {"OLD": LEGACY, "ALICE_KEY": ALICE})
    assert access.operator(bearer(ALICE)) == "alice"
    assert access.operator(bearer(BOB)) == "bob"
    assert access.operator(bearer(LEGACY)) == "admin"  # the single key of old configs
    assert access.operator(bearer("someone-else-0123456789")) is None
    assert access.operator(None) is None
    assert all(access.allows(Gate.ADMIN, bearer(k)) for k in (ALICE, BOB, LEGACY))
    assert config.keyed and not access.anonymous
    assert ALICE not in repr(access) and BOB not in repr(access)  # digests only


def test_operators_alone_make_the_control_plane_keyed() -> None:
    config = AdminAccessConfig.model_validate({"operators": {"carol": {"key_env": "C"}}})
    assert config.keyed
    access = ControlAccess.load(config, "127.0.0.1", {"C": ALICE})
    assert not access.anonymous and access.operator(bearer(ALICE)) == "carol"


def test_an_open_loopback_control_plane_acts_as_anonymous() -> None:
    access = ControlAccess.load(AdminAccessConfig(), "127.0.0.1", {})
    assert access.anonymous and access.operator(None) == "anonymous"


@pytest.mark.parametrize(
    "operators",
    [
        {"bad name": {"key_env": "A"}},
        {"alice": {}},  # no key
        {"admin": {"key_env": "A"}},  # the legacy key's name, taken
    ],
)
def test_bad_operators_are_config_errors(operators: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        AdminAccessConfig.model_validate({"key_env": "OLD", "operators": operators})


def test_two_operators_may_not_share_a_key() -> None:
    config = AdminAccessConfig.model_validate(
        {"operators": {"alice": {"key_env": "A"}, "bob": {"key_env": "B"}}}
    )
    with pytest.raises(ConfigError, match="share a key"):
        ControlAccess.load(config, "127.0.0.1", {"A": ALICE, "B": ALICE})


def test_a_missing_operator_key_is_a_config_error_that_names_the_operator() -> None:
    config = AdminAccessConfig.model_validate({"operators": {"alice": {"key_env": "A"}}})
    with pytest.raises(ConfigError, match="operator alice"):
        ControlAccess.load(config, "127.0.0.1", {})


def test_an_operators_key_file_is_relative_to_the_config_and_checked_before_start(
    tmp_path: Path,
) -> None:
    from gateway.config import parse_config
    from gateway.config.paths import resolve_paths
    from gateway.control.preflight import config_problems

    data = {
        "server": {"admin": {"operators": {"bob": {"key_file": "keys/bob"}}}},
        "pools": {"p": {"model": "m", "replicas": [{"id": "a", "url": "http://127.0.0.1:1"}]}},
        "models": {"d": {"pool": "p"}},
    }
    resolve_paths(data, tmp_path)
    problems = config_problems(parse_config(data))
    assert problems == [f"server.admin.operators.bob.key_file: no such file: {tmp_path}/keys/bob"]

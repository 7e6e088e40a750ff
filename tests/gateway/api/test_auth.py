"""The control plane's keys: digests only, constant-time compare, the two gates, protected mode."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway.api.auth import (
    ControlAccess,
    Gate,
    KeyRing,
    bearer_token,
    is_loopback,
    read_keys,
    refuse_unprotected,
)
from gateway.config import ConfigError
from gateway.config.access import AdminAccessConfig

ADMIN = "admin-key-0123456789abcdef"
METRICS = "metrics-key-0123456789abcdef"


def bearer(key: str) -> bytes:
    return f"Bearer {key}".encode()


def test_a_key_ring_keeps_digests_and_admits_only_its_keys() -> None:
    ring = KeyRing.of(ADMIN, "second-key-0123456789")
    assert ring._digests == (  # all it holds
        hashlib.sha256(ADMIN.encode()).digest(),
        hashlib.sha256(b"second-key-0123456789").digest(),
    )
    assert ring.admits(ADMIN) and ring.admits(ADMIN.encode())
    assert ring.admits("second-key-0123456789")
    assert not ring.admits(ADMIN + "x") and not ring.admits(ADMIN[:-1])
    assert not ring.admits(None) and not ring.admits("") and not ring.admits(b"")
    assert not KeyRing().admits(ADMIN) and not KeyRing()


def test_the_compare_is_hmac_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.api.auth as auth

    calls: list[tuple[bytes, bytes]] = []

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return a == b

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)  # type: ignore[attr-defined]
    assert KeyRing.of("first-key-0123456789", ADMIN).admits(ADMIN)
    assert len(calls) == 2  # every digest compared, no early exit on the first match


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        (b"Bearer abc", b"abc"),
        (b"bearer   abc  ", b"abc"),
        (b"Basic YWJj", None),
        (b"Bearer ", None),
        (b"abc", None),
    ],
)
def test_bearer_token(header: bytes | None, token: bytes | None) -> None:
    assert bearer_token(header) == token


def access(*, anonymous: bool = False) -> ControlAccess:
    return ControlAccess(KeyRing.of(ADMIN), KeyRing.of(METRICS), anonymous=anonymous)


@pytest.mark.parametrize(
    ("gate", "header", "allowed"),
    [
        (Gate.ADMIN, None, False),
        (Gate.ADMIN, bearer("wrong-key-0123456789abcdef"), False),
        (Gate.ADMIN, bearer(ADMIN), True),
        (Gate.ADMIN, bearer(METRICS), False),  # the metrics key opens /metrics only
        (Gate.ADMIN, ADMIN.encode(), False),  # not a Bearer header
        (Gate.METRICS, None, False),
        (Gate.METRICS, bearer(METRICS), True),
        (Gate.METRICS, bearer(ADMIN), True),
        (Gate.METRICS, bearer("wrong-key-0123456789abcdef"), False),
        (Gate.OPEN, None, True),
    ],
)
def test_the_gates(gate: Gate, header: bytes | None, allowed: bool) -> None:
    assert access().allows(gate, header) is allowed


def test_anonymous_access_opens_every_gate() -> None:
    assert access(anonymous=True).allows(Gate.ADMIN, None)


def test_anonymous_only_on_loopback_with_no_admin_key(tmp_path: Path) -> None:
    none = AdminAccessConfig()
    assert ControlAccess.load(none, "127.0.0.1", {}).anonymous
    assert ControlAccess.load(none, "localhost", {}).anonymous
    assert not ControlAccess.load(none, "0.0.0.0", {}).anonymous
    keyed = AdminAccessConfig(key_env="GW_KEY")
    loaded = ControlAccess.load(keyed, "127.0.0.1", {"GW_KEY": ADMIN})
    assert not loaded.anonymous and loaded.allows(Gate.ADMIN, bearer(ADMIN))


def test_keys_from_a_file_and_a_variable(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text(f"# rotation: old and new\n{ADMIN}\n\nnew-admin-key-0123456789\n")
    ring = read_keys("admin key", str(file), "GW_KEY", {"GW_KEY": " env-admin-key-0123456789\n"})
    assert len(ring) == 3
    assert ring.admits(ADMIN) and ring.admits("new-admin-key-0123456789")
    assert ring.admits("env-admin-key-0123456789")


@pytest.mark.parametrize(
    ("content", "environ", "message"),
    [
        (None, {}, "cannot read"),
        ("# nothing\n\n", {"GW_KEY": ADMIN}, "holds no key"),
        (ADMIN, {}, "variable GW_KEY: holds no key"),
        (ADMIN, {"GW_KEY": "   "}, "variable GW_KEY: holds no key"),
        ("short-secret", {"GW_KEY": ADMIN}, "shorter than 16"),
        (ADMIN, {"GW_KEY": "has white space inside it"}, "white space"),
    ],
)
def test_unusable_keys_are_config_errors_that_never_quote_a_key(
    tmp_path: Path, content: str | None, environ: dict[str, str], message: str
) -> None:
    file = tmp_path / "keys"
    if content is not None:
        file.write_text(content)
    with pytest.raises(ConfigError, match=message) as raised:
        read_keys("admin key", str(file), "GW_KEY", environ)
    for secret in ("short-secret", "has white space", ADMIN):
        assert secret not in str(raised.value)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("gateway.internal", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_protected_mode() -> None:
    refuse_unprotected(AdminAccessConfig(), "127.0.0.1")
    refuse_unprotected(AdminAccessConfig(key_file="/run/secrets/gw"), "0.0.0.0")
    with pytest.raises(ConfigError, match="protected mode") as refused:
        refuse_unprotected(AdminAccessConfig(metrics_key_env="M"), "0.0.0.0")
    assert "server.admin.key_env" in str(refused.value)


def test_check_config_refuses_what_serve_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.cli import main

    body = "pools: {p: {model: m, replicas: [{id: a, url: 'http://127.0.0.1:9'}]}}\n"
    body += "models: {d: {pool: p}}\n"
    open_config, keyed_config = tmp_path / "open.yaml", tmp_path / "keyed.yaml"
    open_config.write_text("server: {host: 0.0.0.0}\n" + body)
    keyed_config.write_text("server: {host: 0.0.0.0, admin: {key_env: GW_KEY}}\n" + body)
    assert main(["check-config", str(open_config)]) == 2
    assert "protected mode" in capsys.readouterr().err
    assert main(["check-config", str(keyed_config)]) == 2  # GW_KEY unset: serve would refuse
    assert "admin key" in capsys.readouterr().err
    assert main(["check-config", str(keyed_config), "--no-files"]) == 0  # away from its machine
    monkeypatch.setenv("GW_KEY", "k" * 32)
    assert main(["check-config", str(keyed_config)]) == 0

    shared = tmp_path / "shared.keys"
    shared.write_text("t" * 32 + "\n")
    tenants = f"tenants: {{a: {{keys_file: {shared}}}, b: {{keys_file: {shared}}}}}\n"
    (tmp_path / "tenants.yaml").write_text(body + tenants)
    assert main(["check-config", str(tmp_path / "tenants.yaml")]) == 2
    err = capsys.readouterr().err
    assert "tenants a and b hold the same key" in err and "t" * 32 not in err


def test_check_config_names_each_problem_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing key file was reported twice: once as a missing file, again when its keys
    were read as `serve` reads them."""
    from gateway.cli import main

    empty = tmp_path / "empty.keys"
    empty.write_text("\n")
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"server: {{admin: {{key_file: {tmp_path / 'gone'}}}}}\n"
        f"tenants: {{a: {{keys_file: {tmp_path / 'gone-too'}}}, b: {{keys_file: {empty}}}}}\n"
        "pools: {p: {model: m, replicas: [{id: a, url: 'http://127.0.0.1:9'}]}}\n"
        "models: {d: {pool: p}}\n"
    )
    assert main(["check-config", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[:3] == [
        f"{path}: server.admin.key_file: no such file: {tmp_path / 'gone'}",
        f"{path}: tenants.a.keys_file: no such file: {tmp_path / 'gone-too'}",
        f"{path}: invalid (2 problem(s))",
    ]
    assert len(lines) == 4 and "--no-files" in lines[3]  # the hint for checking it elsewhere
    path.write_text(path.read_text().replace(str(tmp_path / "gone-too"), str(empty)))
    assert main(["check-config", str(path)]) == 2  # the file is there: now what is in it
    assert "tenants: tenant a key file" in capsys.readouterr().err

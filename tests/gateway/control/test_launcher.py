"""`gateway up`'s replica command lines and fault key, and its supervision of child processes
(short-lived Python children on a fake clock)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.cli import main
from gateway.config.models import GatewayConfig
from gateway.control.launcher import (
    FAULT_KEY_ENV,
    RESTART_BASE_S,
    RESTART_MAX_S,
    STABLE_S,
    Launcher,
    LaunchError,
    LocalReplica,
    fault_key_file,
    replica_argv,
    restart_delay,
)
from tests.support.processes import REPO_ROOT, free_port, wait_until

MODEL = REPO_ROOT / "fallback_models" / "digits-logreg.onnx"


def config(enable_faults: bool, port: int = 9101, scheme: str = "http") -> GatewayConfig:
    local = {"model_path": str(MODEL), "enable_faults": enable_faults}
    return GatewayConfig.model_validate(
        {
            "pools": {
                "p": {
                    "model": "digits",
                    "local": local,
                    "replicas": [{"id": "r0", "url": f"{scheme}://127.0.0.1:{port}"}],
                }
            },
            "models": {"digits": {"pool": "p"}},
        }
    )


def argv(enable_faults: bool, key_file: Path | None) -> list[str]:
    pool = config(enable_faults).pools["p"]
    assert pool.local is not None
    return replica_argv(pool, pool.replicas[0], pool.local, key_file)


def test_faults_off_pass_neither_flag_nor_key(tmp_path: Path) -> None:
    args = argv(False, tmp_path / "key")
    assert "--enable-faults" not in args and "--fault-key-file" not in args


def test_faults_on_pass_the_key_file_never_the_key(tmp_path: Path) -> None:
    args = argv(True, tmp_path / "key")
    assert args[-3:] == ["--enable-faults", "--fault-key-file", str(tmp_path / "key")]
    assert argv(True, None)[-1] == "--enable-faults"  # the key comes from the environment


def test_a_grpc_replica_serves_grpc_on_its_urls_port_and_rest_on_any() -> None:
    pool = config(False, 9201, "grpc").pools["p"]
    assert pool.local is not None
    args = replica_argv(pool, pool.replicas[0], pool.local)
    assert args[args.index("--port") + 1] == "0"
    assert args[args.index("--grpc-port") + 1] == "9201"


@pytest.mark.integration
async def test_gateway_up_waits_for_a_grpc_replica_over_grpc() -> None:
    launcher = Launcher(config(False, free_port(), "grpc"))
    try:
        launcher.spawn()
        await launcher.wait_ready()  # ServerReady: the REST port is not known
        assert launcher.replicas[0].process.poll() is None
    finally:
        launcher.stop()


def test_a_new_private_key_file_per_run_and_its_path_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.control.launcher"):
        first = fault_key_file({}, str(tmp_path))
        second = fault_key_file({FAULT_KEY_ENV: " "}, str(tmp_path))
    assert first is not None and second is not None
    key = first.read_text().strip()
    assert len(key) >= 32 and key != second.read_text().strip()
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert f"Bearer $(cat {first})" in caplog.text
    assert key not in caplog.text


def test_the_environments_key_is_left_to_the_replicas(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.control.launcher"):
        assert fault_key_file({FAULT_KEY_ENV: "chosen-0123456789"}, str(tmp_path)) is None
    assert list(tmp_path.iterdir()) == []
    assert "$REPLICA_FAULT_KEY" in caplog.text and "chosen" not in caplog.text


def test_a_key_the_replicas_would_refuse_stops_gateway_up_first(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="has 6 characters; the replicas need at least 16"):
        fault_key_file({FAULT_KEY_ENV: "chosen"}, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
async def test_gateway_up_with_faults_needs_no_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FAULT_KEY_ENV, raising=False)
    launcher = Launcher(config(True, free_port()))
    try:
        launcher.spawn()
        await launcher.wait_ready()
        assert launcher.fault_key_file is not None
        key_file = launcher.fault_key_file
        url = f"{launcher.replicas[0].replica.url}/admin/faults"
        bearer = {"Authorization": f"Bearer {key_file.read_text().strip()}"}
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            assert (await client.post(url, json={"latency_ms": 1})).status_code == 401
            assert (await client.post(url, json={"latency_ms": 1}, headers=bearer)).is_success
    finally:
        launcher.stop()
    assert not key_file.exists()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _ignores(pid: int, signum: int) -> bool:
    """Whether process ``pid`` ignores ``signum`` now (its ``SigIgn`` mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _supervised(clock: FakeClock, argv: list[str]) -> tuple[Launcher, LocalReplica]:
    launcher = Launcher(config(False), clock=clock)
    replica = config(False).pools["p"].replicas[0]
    launcher.replicas.append(
        LocalReplica(replica, subprocess.Popen(argv), argv, started_at=clock())
    )
    return launcher, launcher.replicas[0]


def test_restart_delays_double_up_to_the_cap() -> None:
    delays = [restart_delay(n) for n in range(1, 10)]
    assert delays[:4] == [
        RESTART_BASE_S,
        2 * RESTART_BASE_S,
        4 * RESTART_BASE_S,
        8 * RESTART_BASE_S,
    ]
    assert max(delays) == RESTART_MAX_S == delays[-1]


def test_an_exited_replica_is_reaped_and_restarted_after_a_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    launcher, local = _supervised(clock, _child("import sys; sys.exit(3)"))
    events: list[tuple[str, str, str]] = []
    launcher.on_event = lambda replica, detail, level: events.append((replica, detail, level))
    try:
        first = local.process
        first.wait(10)
        with caplog.at_level(logging.WARNING, logger="gateway.control.launcher"):
            launcher.check_children()  # reaped: a restart is due after the base delay
            assert local.restart_at == clock.now + RESTART_BASE_S and local.crashes == 1
            assert "exited with code 3; restarting in 0.5 s" in caplog.text
            launcher.check_children()
            assert local.process is first  # not before its time
            clock.now += RESTART_BASE_S
            launcher.check_children()
        assert local.process is not first and local.restarts == 1 and local.restart_at is None
        assert "restarted replica r0" in caplog.text
        assert events == [
            ("r0", "exited with code 3; restart 1 in 0.5 s", "bad"),
            ("r0", f"restarted (pid {local.pid}; restart 1)", "warn"),
        ]  # the timeline's lines, not only the log's
        with pytest.raises(ChildProcessError):
            os.waitpid(first.pid, os.WNOHANG)  # reaped: no zombie left behind
        local.process.wait(10)
        launcher.check_children()  # it crashed again: twice the wait
        assert local.restart_at == clock.now + 2 * RESTART_BASE_S and local.crashes == 2
    finally:
        launcher.stop()


def test_a_replica_that_stays_up_starts_the_backoff_over() -> None:
    clock = FakeClock()
    launcher, local = _supervised(clock, _child("import time; time.sleep(60)"))
    try:
        local.crashes = 5
        clock.now += STABLE_S
        launcher.check_children()
        assert local.crashes == 0 and local.restart_at is None
    finally:
        launcher.stop()


def test_stop_terminates_then_kills_by_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gateway.control.launcher.STOP_GRACE_S", 0.5)
    clock = FakeClock()
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    launcher, local = _supervised(clock, _child(stubborn))
    process = local.process
    wait_until(lambda: _ignores(process.pid, signal.SIGTERM), 30, message="SIGTERM ignored")
    launcher.stop()
    assert process.returncode == -signal.SIGKILL and launcher.replicas == []


@pytest.fixture
def listening() -> Iterator[int]:
    """A port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as other:
        yield other.getsockname()[1]


def test_a_replica_port_in_use_is_named_before_anything_starts(listening: int) -> None:
    launcher = Launcher(config(False, listening))
    with pytest.raises(LaunchError) as taken:
        launcher.spawn()
    assert str(taken.value).startswith(
        f"replica r0: address 127.0.0.1:{listening} is already in use (change its port"
    )
    assert "make run CONFIG=" in str(taken.value)
    assert launcher.replicas == []


@pytest.mark.parametrize(
    ("whose", "what"),
    [("replica", "replica r0"), ("gateway", "the gateway"), ("grpc", "the gateway's gRPC door")],
)
def test_gateway_up_on_a_port_in_use_says_so_on_its_last_line(
    whose: str, what: str, listening: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replica_port = listening if whose == "replica" else free_port()
    path = tmp_path / "gateway.yaml"
    path.write_text(config(False, replica_port).model_dump_json(exclude_defaults=True))
    ports = {name: listening if whose == name else free_port() for name in ("gateway", "grpc")}
    argv = [
        "up",
        "--config",
        str(path),
        "--port",
        str(ports["gateway"]),
        "--grpc-port",
        str(ports["grpc"]),
    ]
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"error: {what}: address 127.0.0.1:{listening} is already in use (")

"""``gateway up`` as a supervisor: it prints a banner with its URLs once it listens, a killed
replica is reaped and restarted (both in the timeline of /admin/history), SIGTERM stops the
gateway (exit 0) and every replica by PID, and a config elsewhere finds its files relative to
itself when started from another directory."""

from __future__ import annotations

import os
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.processes import ManagedProcess, free_port, http_status, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"started replica r0 \(pid (\d+)\)")
RESTARTED = re.compile(r"restarted replica r0 \(pid (\d+)")


def gone(pid: int) -> bool:
    """Neither running nor a zombie (a zombie keeps its /proc entry until reaped)."""
    return not Path(f"/proc/{pid}").exists()


def test_gateway_up_restarts_a_killed_replica_and_stops_all_on_sigterm(
    models_dir: Path, tmp_path: Path
) -> None:
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    site.mkdir()
    elsewhere.mkdir()
    model = os.path.relpath(models_dir / "digits-mlp.onnx", site)  # relative to the config
    golden = os.path.relpath(REPO / "fallback_models" / "digits-golden.json", site)
    config = {
        "server": {"drain_s": 0.2},
        "log": {"json_lines": False},
        "pools": {
            "p": {
                "model": "digits-mlp",
                "version": "1",
                "local": {"model_path": model},
                "golden": {"file": golden},
                "health": {"interval_s": 0.2},
                "replicas": [{"id": "r0", "url": f"http://127.0.0.1:{free_port()}"}],
            }
        },
        "models": {"digits": {"pool": "p", "fallback": {"model": "digits-logreg"}}},
    }
    (site / "gateway.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "gateway.cli",
        "up",
        "--config",
        "../site/gateway.yaml",
        "--port",
        str(port),
        "--grpc-port",
        str(free_port()),
    ]
    env = {"PYTHONPATH": str(REPO)}
    ready = f"http://127.0.0.1:{port}/v2/health/ready"
    with ManagedProcess(argv, env=env, cwd=elsewhere, name="gateway-up") as up:
        wait_until(lambda: http_status(ready) == 200, 60, message=up.log_text)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: f"dashboard  {base}/dashboard" in up.log_text(), 10, message=up.log_text)
        assert f"gateway up: 1 local replica(s) ready, serving {base}\n" in up.log_text()
        first = int(STARTED.findall(up.log_text())[0])
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: RESTARTED.search(up.log_text()) is not None, 20, message=up.log_text)
        second = int(RESTARTED.findall(up.log_text())[0])
        assert "exited with code -9; restarting in 0.5 s" in up.log_text()
        timeline = httpx.get(f"{base}/admin/history", trust_env=False, timeout=5).json()
        told = [
            (e["subject"], e["detail"], e["level"])
            for e in reversed(timeline["events"])
            if e["kind"] == "supervisor"
        ]
        assert told == [
            ("r0", "exited with code -9; restart 1 in 0.5 s", "bad"),
            ("r0", f"restarted (pid {second}; restart 1)", "warn"),
        ]  # on the dashboard's timeline, not only in the log
        wait_until(lambda: gone(first), 5, message="the killed replica reaped")
        wait_until(lambda: http_status(ready) == 200, 30, message=up.log_text)
        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0, up.log_text()
        wait_until(lambda: gone(second), 5, message="the restarted replica stopped")
        assert "ignored SIGTERM" not in up.log_text()

"""Real gateway processes for integration tests, configured from a dict, on a free port."""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.processes import (
    ManagedProcess,
    ReplicaProcess,
    free_port,
    http_status,
    start_bound,
)

MODELS = Path(__file__).resolve().parents[2] / "models"


class GatewayProcess(ManagedProcess):
    """``gateway serve`` on loopback; ``env`` adds variables (an admin key named by the config).

    ``server.drain_s`` is 0 unless the config sets it, so a test's SIGTERM stops it at once;
    ``server.standby_worker`` is false unless it sets it (one process fewer to start).
    ``grpc_port``: also serve the V2 gRPC service there (``--grpc-port``); ready once it listens.
    ``nofile``: the (soft, hard) limit on open file descriptors it starts with.
    """

    def __init__(
        self,
        config: dict[str, Any],
        port: int,
        env: dict[str, str] | None = None,
        grpc_port: int | None = None,
        nofile: tuple[int, int] | None = None,
    ) -> None:
        server = config.get("server", {})
        # stopped at once unless asked; no worker started ahead (a second of imports each start)
        # unless the test replaces workers
        config = {**config, "server": {"drain_s": 0, "standby_worker": False, **server}}
        handle, path = tempfile.mkstemp(prefix="gateway-", suffix=".yaml")
        self.config_path = Path(path)
        with open(handle, "w") as out:
            yaml.safe_dump(config, out)
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", path, "--port", str(port)]
        if grpc_port is not None:
            argv += ["--grpc-port", str(grpc_port)]
        limits = None if nofile is None else {resource.RLIMIT_NOFILE: nofile}
        super().__init__(argv, env=env, name="gateway", rlimits=limits)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.grpc_port = grpc_port
        self.grpc_url = None if grpc_port is None else f"127.0.0.1:{grpc_port}"

    def worker_pids(self, headers: dict[str, str] | None = None) -> list[int]:
        """The PIDs of its data-plane workers, by index (from ``/admin/state``: ``headers``
        for a gateway whose admin API needs a key); 0 for a slot whose worker is being
        started again (its ``pid`` is null until the new one runs)."""
        request = urllib.request.Request(f"{self.url}/admin/state", headers=headers or {})
        with urllib.request.urlopen(request, timeout=5) as answer:
            doc = json.loads(answer.read())
        return [int(w["pid"] or 0) for w in doc["workers"]["workers"]]

    @property
    def data_pid(self) -> int:
        """The PID of its one data-plane worker: the process that holds its clients'
        connections, bodies and answers (the control process is `pid`)."""
        (pid,) = self.worker_pids()
        return pid

    def ready(self) -> bool:
        if http_status(f"{self.url}/v2/health/ready", timeout=0.5) != 200:
            return False
        return self.grpc_port is None or _listening(self.grpc_port)

    def cleanup(self) -> None:
        super().cleanup()
        self.config_path.unlink(missing_ok=True)


def start_gateway(
    config: dict[str, Any],
    ready_timeout: float = 30.0,
    env: dict[str, str] | None = None,
    *,
    grpc: bool = False,
    nofile: tuple[int, int] | None = None,
) -> GatewayProcess:
    """Starts ``gateway serve`` and waits until it reports ready (every model has a replica);
    ``grpc``: with its gRPC door on a free port too; ``nofile``: its descriptor limit."""
    return start_bound(
        lambda: GatewayProcess(config, free_port(), env, free_port() if grpc else None, nofile),
        "gateway",
        ready_timeout,
    )


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


def pool_config(
    replicas: list[ReplicaProcess], *, pool: dict[str, Any] | None = None, **model: Any
) -> dict[str, Any]:
    """A one-pool config whose model ``digits`` is served by ``replicas``."""
    first = replicas[0]
    return {
        "pools": {
            "primary": {
                "model": first.model_name,
                "version": first.model_version,
                "replicas": [{"id": f"r{i}", "url": r.url} for i, r in enumerate(replicas)],
                **(pool or {}),
            }
        },
        "models": {"digits": {"pool": "primary", **model}},
    }

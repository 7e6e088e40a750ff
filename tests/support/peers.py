"""Real Open Inference Protocol servers (MLServer, KServe) as replicas in tests.

They run from their own venvs under ``.peers/`` (built by `make peers`, see `.ci/peers.sh`),
because the two pin conflicting packages. Each is started in a new session on free loopback
ports and stopped by its process group, since a server may fork workers of its own; waiting is
polling with a deadline, as in `tests.support.processes`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import (
    REPO_ROOT,
    ManagedProcess,
    free_port,
    http_status,
    start_bound,
)

PEERS_DIR = Path(os.environ.get("PEERS_DIR", REPO_ROOT / ".peers"))
MODELS_DIR = PEERS_DIR / "models"
MODEL_NAME = "digits"
KSERVE_SERVER = Path(__file__).resolve().parents[1] / "peers" / "kserve_digits.py"
TRAINER = Path(__file__).resolve().parents[1] / "peers" / "train_digits.py"
# Becomes the session leader, then runs the real server in its place (same PID), so the
# server and any worker it forks share a process group whose ID is the PID we hold.
_SETSID_EXEC = "import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[1:])"


@dataclass(frozen=True)
class Peer:
    """One peer server kind: its venv and the requirement stamp `.ci/peers.sh` writes."""

    name: str

    @property
    def venv(self) -> Path:
        return PEERS_DIR / self.name

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def missing(self) -> str | None:
        """Why this peer cannot run here, or None when its venv is built."""
        if not (self.venv / ".peer-stamp").is_file() or not self.python.is_file():
            return f"{self.name} venv missing at {self.venv}: run `make peers` (minutes)"
        return None


MLSERVER = Peer("mlserver")
KSERVE = Peer("kserve")


def model_file() -> Path:
    """The digits estimator both peers serve, trained (once) in the MLServer venv."""
    path = MODELS_DIR / MODEL_NAME / "model.joblib"
    if not path.is_file():
        subprocess.run(
            [str(MLSERVER.python), str(TRAINER), "--out", str(MODELS_DIR)],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            check=True,
            timeout=300,
        )
    return path


class PeerProcess(ManagedProcess):
    """A peer server leading its own process group; ``url`` is its V2 REST base URL."""

    def __init__(
        self,
        peer: Peer,
        argv: Sequence[str],
        *,
        port: int,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        grpc_port: int | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        launcher = [str(peer.python), "-c", _SETSID_EXEC, str(peer.python), *argv]
        super().__init__(launcher, env=env, cwd=cwd, name=f"peer-{peer.name}")
        self.peer = peer
        self.port = port
        self.url = f"http://{host}:{port}"
        self.grpc_port = grpc_port  # its V2 gRPC port, where it serves one
        self.grpc_target = None if grpc_port is None else f"127.0.0.1:{grpc_port}"
        self.model_name = MODEL_NAME
        self.workdir = cwd
        self.metrics_port: int | None = None  # where its /metrics is, if not on ``port``

    def ready(self) -> bool:
        """Server ready and the digits model loaded (two V2 health calls)."""
        return (
            http_status(f"{self.url}/v2/health/ready", timeout=0.5) == 200
            and http_status(f"{self.url}/v2/models/{MODEL_NAME}/ready", timeout=0.5) == 200
        )

    def _signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the whole group has exited
            os.killpg(self.pid, sig)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM to the process group, SIGKILL to whatever of it is left after ``timeout``."""
        if self.alive():
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.wait(timeout)
        self._signal_group(signal.SIGKILL)  # the leader, or workers that outlived it
        return super().stop(timeout)

    def cleanup(self) -> None:
        super().cleanup()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _mlserver_dir(
    http_port: int,
    grpc_port: int,
    metrics_port: int | None = None,
    *,
    queued: bool = False,
    parallel: int = 0,
    host: str = "127.0.0.1",
) -> Path:
    """A throwaway MLServer model repository: settings.json on our ports, the digits model.

    MLServer 1.7.1 cannot turn gRPC off, so it gets a second free port; metrics are off, and
    inference runs in the server process (``parallel_workers: 0``) so there is one PID, unless
    ``parallel`` names how many parallel workers it runs (child processes, whose queue is the
    ``parallel_request_queue`` family of `gateway.upstream.probes.load_names`; they need the
    uvloop that `.ci/peers.sh` pins). With ``metrics_port`` its ``/metrics`` is served there;
    ``queued``: adaptive batching. ``host``: the loopback address it binds (127.0.0.2 and on
    let several share one metrics port, as replicas on several hosts do).
    """
    root = Path(tempfile.mkdtemp(prefix="peer-mlserver-"))
    settings = {
        "host": host,
        "http_port": http_port,
        "grpc_port": grpc_port,
        "metrics_endpoint": None if metrics_port is None else "/metrics",
        "parallel_workers": parallel,
        "debug": False,
        "metrics_dir": str(root / ".metrics"),
    }
    if metrics_port is not None:
        settings["metrics_port"] = metrics_port
    (root / "settings.json").write_text(json.dumps(settings))
    trained = MODELS_DIR / MODEL_NAME / "model-settings.json"
    model_settings = json.loads(trained.read_text())
    model_settings["parameters"]["uri"] = str(model_file())
    if queued:
        model_settings.update(max_batch_size=8, max_batch_time=0.01)
    (root / MODEL_NAME).mkdir()
    (root / MODEL_NAME / "model-settings.json").write_text(json.dumps(model_settings))
    return root


def _launch_mlserver(
    queued: bool = False,
    parallel: int = 0,
    host: str = "127.0.0.1",
    metrics_port: int | None = None,
) -> PeerProcess:
    port, grpc_port = free_port(), free_port()
    if metrics_port is None and (queued or parallel):
        metrics_port = free_port()
    root = _mlserver_dir(port, grpc_port, metrics_port, queued=queued, parallel=parallel, host=host)
    mlserver = MLSERVER.venv / "bin" / "mlserver"
    argv = [str(mlserver), "start", str(root)]
    proc = PeerProcess(MLSERVER, argv, port=port, cwd=root, grpc_port=grpc_port, host=host)
    proc.metrics_port = metrics_port
    return proc


def _launch_kserve(grpc: bool = False) -> PeerProcess:
    port = free_port()
    grpc_port = free_port() if grpc else None
    enable = (
        ["--enable_grpc", "false"]
        if grpc_port is None
        else ["--enable_grpc", "true", "--grpc_port", str(grpc_port)]
    )
    argv = [
        str(KSERVE_SERVER),
        "--http_port",
        str(port),
        *enable,
        "--model_path",
        str(model_file()),
        "--workers",
        "1",
    ]
    return PeerProcess(KSERVE, argv, port=port, grpc_port=grpc_port)


def _start(
    launch: Callable[[], PeerProcess], ready_timeout: float, attempts: int = 3
) -> PeerProcess:
    """Starts a peer on fresh free ports until one binds; waits (bounded) until it is ready."""
    return start_bound(launch, "peer", ready_timeout, attempts, interval=0.1)


def start_mlserver(
    ready_timeout: float = 90.0,
    *,
    queued: bool = False,
    parallel: int = 0,
    host: str = "127.0.0.1",
    metrics_port: int | None = None,
) -> PeerProcess:
    """MLServer (sklearn runtime) serving ``digits`` version 1 on ``host`` (a loopback
    address); ``queued``: with adaptive batching; ``parallel``: with that many parallel
    workers. Either way its metrics are on a port of their own (``metrics_port``: this one,
    or a free one)."""
    return _start(lambda: _launch_mlserver(queued, parallel, host, metrics_port), ready_timeout)


def start_kserve(ready_timeout: float = 90.0, *, grpc: bool = False) -> PeerProcess:
    """KServe with `kserve_digits.DigitsModel` as ``digits``; it binds 0.0.0.0 (hard-coded).
    ``grpc``: its gRPC server too (``--enable_grpc``), on a free port of its own."""
    return _start(lambda: _launch_kserve(grpc), ready_timeout)

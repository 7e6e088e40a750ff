"""Start, wait for and stop real processes (replicas, gateways) in tests.

Integration tests must never leak a process or hang: every process is started through
`ManagedProcess`, which logs its output to a file for debugging and is stopped by PID
(SIGTERM, then SIGKILL after a bounded wait); waiting is always polling with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, TypeVar

from tests.support.faults import FAULT_KEY, fault_env

REPO_ROOT = Path(__file__).resolve().parents[2]
# A process at the end of its test: past this, SIGKILL (one serving a hung request, or a
# replica told to hang, otherwise holds the suite for the whole of `stop`'s default wait).
CLEANUP_GRACE_S = 3.0


# Under pytest-xdist each worker picks its ports from its own range below the kernel's
# ephemeral ports (32768 up), so two workers never pick one port between a pick and its bind.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
_PORTS_PER_WORKER = 2_000
_FIRST_PORT = 12_000


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (bound, read, released): the kernel's pick, or
    under pytest-xdist a free one from this worker's own range."""
    if _WORKER.startswith("gw") and _WORKER[2:].isdigit():
        first = _FIRST_PORT + int(_WORKER[2:]) % 10 * _PORTS_PER_WORKER
        for _ in range(50):
            port = random.randrange(first, first + _PORTS_PER_WORKER)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until(
    predicate: Callable[[], bool],
    timeout: float,
    *,
    interval: float = 0.02,
    message: str | Callable[[], str] = "condition",
) -> None:
    """Poll ``predicate`` until it is true; `TimeoutError` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {text}")
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], bool],
    timeout: float,
    *,
    interval: float = 0.01,
    message: str | Callable[[], str] = "condition",
) -> None:
    """`wait_until` for a running event loop: other tasks run between polls.

    ``interval=0`` checks after every turn of the loop (``asyncio.sleep(0)``), for conditions
    that another task sets between two turns; the bound is still the ``timeout`` in seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if predicate():
            return
        if loop.time() >= deadline:
            text = message() if callable(message) else message
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {text}")
        await asyncio.sleep(interval)


def http_status(url: str, timeout: float = 1.0) -> int | None:
    """The status of a GET to ``url``, or None if nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def _set_limits(limits: Mapping[int, tuple[int, int]]) -> None:
    for which, (soft, hard) in limits.items():
        resource.setrlimit(which, (soft, hard))


class ManagedProcess:
    """A child process started from ``argv`` with stdout and stderr captured to a log file."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        name: str | None = None,
        rlimits: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        """``rlimits``: resource limits (`resource.RLIMIT_*` -> soft, hard) the child starts
        with (a test cannot lower its own safely)."""
        self.argv = list(argv)
        self.name = name or Path(self.argv[0]).name
        fd, log_path = tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")
        self.log_path = Path(log_path)
        self._log = os.fdopen(fd, "wb")
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        try:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=full_env,
                cwd=str(cwd or REPO_ROOT),
                preexec_fn=None if not rlimits else functools.partial(_set_limits, rlimits),
            )
        except BaseException:
            self._log.close()
            self.log_path.unlink(missing_ok=True)
            raise

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def alive(self) -> bool:
        return self._popen.poll() is None

    def send_signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """The exit code; `subprocess.TimeoutExpired` if still running after ``timeout``."""
        return self._popen.wait(timeout)

    def log_text(self) -> str:
        if not self._log.closed:  # after stop() it is closed: the file is whole
            self._log.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM by PID, SIGKILL if still alive after ``timeout``; returns the exit code."""
        try:
            if self.alive():
                os.kill(self.pid, signal.SIGTERM)
                try:
                    return self._popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    os.kill(self.pid, signal.SIGKILL)
            return self._popen.wait(timeout)
        finally:
            self._log.close()

    def cleanup(self) -> None:
        """Stop the process (a stopped one is continued first; SIGKILL after `CLEANUP_GRACE_S`:
        a test that checks a graceful exit calls `stop` itself) and delete its log."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
        self.stop(CLEANUP_GRACE_S)
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class ReplicaProcess(ManagedProcess):
    """A ``replica serve`` process; ``url`` is its base URL.

    It gets ``fault_key`` (the tests' `FAULT_KEY` unless told otherwise; None: no key at all)
    through the environment, so ``--enable-faults`` in ``argv`` works and a restart from the
    same ``argv`` keeps the key.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        host: str,
        port: int,
        name: str,
        version: str,
        fault_key: str | None = FAULT_KEY,
        grpc_port: int | None = None,
    ) -> None:
        super().__init__(argv, env=fault_env(fault_key or ""), name=f"replica-{name}")
        self.host, self.port = host, port
        self.model_name, self.model_version = name, version
        self.url = f"http://{host}:{port}"
        self.grpc_port = grpc_port  # with --grpc-port: its V2 gRPC service (grpc_url)
        self.grpc_url = None if grpc_port is None else f"grpc://{host}:{grpc_port}"

    def ready(self) -> bool:
        return http_status(f"{self.url}/v2/health/ready", timeout=0.5) == 200


class Startable(Protocol):
    """A process that can say whether it is ready (what `start_bound` waits for)."""

    def ready(self) -> bool: ...
    def alive(self) -> bool: ...
    def log_text(self) -> str: ...
    def cleanup(self) -> None: ...


S = TypeVar("S", bound=Startable)


def start_bound(
    launch: Callable[[], S],
    what: str,
    ready_timeout: float,
    attempts: int = 3,
    interval: float = 0.05,
) -> S:
    """``launch()`` a server on a free port and wait (bounded) until it is ready.

    The port is picked before the child binds it, so another process can take it in between;
    if the child dies with "address already in use" it is launched again (on another port).
    """
    last_log = ""
    for _ in range(attempts):
        proc = launch()
        try:
            wait_until(
                lambda: proc.ready() or not proc.alive(),  # noqa: B023 (this iteration's)
                ready_timeout,
                interval=interval,
                message=lambda: f"{what} to be ready; log:\n{proc.log_text()}",  # noqa: B023
            )
        except BaseException:
            proc.cleanup()
            raise
        if proc.alive():
            return proc
        last_log = proc.log_text()
        proc.cleanup()
        # "address already in use" (an OS error), "address 127.0.0.1:N is already in use"
        # (the gRPC door's)
        if "already in use" not in last_log.lower():
            break
    raise RuntimeError(f"{what} did not start; log:\n{last_log}")


def start_replica(
    model: str | Path,
    *,
    name: str = "digits",
    version: str = "1",
    host: str = "127.0.0.1",
    enable_faults: bool = False,
    fault_key: str | None = FAULT_KEY,
    extra_args: Sequence[str] = (),
    ready_timeout: float = 30.0,
    attempts: int = 3,
    grpc: bool = False,
) -> ReplicaProcess:
    """Start ``replica serve`` on a free port and wait (bounded) until it reports ready.

    With ``enable_faults`` its ``/admin/faults`` takes ``fault_key`` (`tests.support.faults`).
    With ``grpc`` it serves V2 gRPC too, on a free port of its own (``grpc_url``).

    The port is picked before the child binds it (`start_bound` launches again on another
    port if it was taken meanwhile).
    """

    def launch() -> ReplicaProcess:
        port = free_port(host)
        grpc_port = free_port(host) if grpc else None
        argv = [
            sys.executable,
            "-m",
            "replicas.cli",
            "serve",
            "--model",
            str(model),
            "--name",
            name,
            "--version",
            version,
            "--host",
            host,
            "--port",
            str(port),
            *(["--enable-faults"] if enable_faults else []),
            *(["--grpc-port", str(grpc_port)] if grpc_port is not None else []),
            *extra_args,
        ]
        return ReplicaProcess(
            argv,
            host=host,
            port=port,
            name=name,
            version=version,
            fault_key=fault_key,
            grpc_port=grpc_port,
        )

    return start_bound(launch, f"replica {name}", ready_timeout, attempts)

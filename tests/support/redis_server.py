"""A real ``redis-server`` on a free loopback port for tests, started and stopped by PID.

No persistence (``--save "" --appendonly no``), so a kill and restart loses all data, as a
Redis restart without persistence does in production. If redis-server is missing the test
fails (CI installs it with .ci/system-deps.sh); it is never skipped.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket

import pytest

from tests.support.processes import ManagedProcess, free_port, wait_until

START_TIMEOUT_S = 10.0
TEST_TIMEOUT_S = 2.0  # per Redis call: a busy CI machine must not turn a slow reply into a failure
_prefixes = itertools.count()


def new_namespace() -> str:
    """A key namespace of its own for each store on the shared server."""
    return f"t{next(_prefixes)}"


def _pong(port: int) -> bool:
    """Whether it answers: ``+PONG``, or ``-NOAUTH`` from one started with a password."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    """``password``: its ``requirepass`` (not in `url`; a test puts it where it wants it)."""

    def __init__(self, password: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (run .ci/system-deps.sh)")
        self.binary = binary
        self.port = free_port()
        self.password = password
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Starts it on ``self.port`` (a new free port if that one was taken meanwhile)."""
        for _ in range(3):
            argv = [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ]
            if self.password is not None:
                argv += ["--requirepass", self.password]
            process = ManagedProcess(argv, name="redis-server")
            wait_until(
                lambda: _pong(self.port) or not process.alive(),  # noqa: B023
                START_TIMEOUT_S,
                message=lambda: f"redis-server on {self.port}: {process.log_text()}",  # noqa: B023
            )
            if process.alive():
                self.process = process
                return
            process.cleanup()
            self.port = free_port()
        raise RuntimeError("redis-server would not start")

    def kill(self) -> None:
        """SIGKILL by PID: the data is gone, connections drop mid-flight."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(5.0)
        self.process.cleanup()
        self.process = None
        wait_until(lambda: not _pong(self.port), 5.0, message=f"port {self.port} to stop answering")

    def pause(self) -> None:
        """SIGSTOP: the port accepts connections but nothing answers (a hung Redis)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None:
            self.resume()
            self.process.cleanup()
            self.process = None

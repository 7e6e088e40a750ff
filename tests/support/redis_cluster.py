"""Real Redis topologies on loopback for tests: a 3-node Redis Cluster, a Sentinel-watched pair.

Each ``redis-server`` is a `ManagedProcess` stopped by PID, on a free port, with no persistence
and its files in a temporary directory; every wait is a poll bounded by time. The Sentinel pair
may require passwords, as production does: one for the data nodes (``requirepass`` and
``masterauth``, which the sentinels are given as ``auth-pass``) and the sentinels' own.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.processes import ManagedProcess, free_port, wait_until
from tests.support.redis_server import START_TIMEOUT_S, _pong

BUS_OFFSET = 10_000  # a cluster node also listens on its port + 10000 (the cluster bus)


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (run .ci/system-deps.sh)")
    return path


def _cli(port: int, *args: str, timeout: float = 5.0, password: str | None = None) -> str:
    auth = ["--no-auth-warning", "-a", password] if password is not None else []
    done = subprocess.run(
        [_binary("redis-cli"), "-h", "127.0.0.1", "-p", str(port), *auth, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout + done.stderr


def _cluster_port() -> int:
    """A free port whose cluster-bus port (+10000) is free too."""
    for _ in range(50):
        port = free_port()
        if port + BUS_OFFSET < 65536:
            try:
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port + BUS_OFFSET))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port pair for a cluster node")


def _answers(port: int) -> bool:
    """Whether a server listens and speaks RESP: ``+PONG``, or ``-NOAUTH`` if it has a password."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class _Node:
    def __init__(
        self, argv: list[str], port: int, name: str, ready: Callable[[int], bool] = _pong
    ) -> None:
        self.port = port
        self.process: ManagedProcess | None = ManagedProcess(argv, name=name)
        wait_until(
            lambda: ready(port) or not self.alive(),
            START_TIMEOUT_S,
            message=lambda: f"{name} on {port}: {self.log()}",
        )
        if not self.alive():
            raise RuntimeError(f"{name} on {port} did not start: {self.log()}")

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def log(self) -> str:
        return self.process.log_text() if self.process is not None else ""

    def kill(self) -> None:
        """SIGKILL by PID."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5.0)
            self.process.cleanup()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.cleanup()
            self.process = None


def _server_argv(port: int, workdir: Path, *extra: str) -> list[str]:
    return [
        _binary("redis-server"),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        str(workdir),
        *extra,
    ]


class RedisClusterServers:
    """Three ``redis-server --cluster-enabled yes`` nodes joined by ``redis-cli --cluster create``
    with no replicas: every slot covered, one primary each."""

    def __init__(self, size: int = 3) -> None:
        self.size = size
        self.dir = Path(tempfile.mkdtemp(prefix="redis-cluster-"))
        self.nodes: list[_Node] = []

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> None:
        try:
            for _ in range(self.size):
                port = _cluster_port()
                self.nodes.append(
                    _Node(
                        _server_argv(
                            port,
                            self.dir,
                            "--cluster-enabled",
                            "yes",
                            "--cluster-config-file",
                            f"nodes-{port}.conf",
                            "--cluster-node-timeout",
                            "5000",
                        ),
                        port,
                        "redis-cluster-node",
                    )
                )
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            out = _cli(
                self.nodes[0].port,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
                timeout=30,
            )
            if "[OK] All 16384 slots covered" not in out:
                raise RuntimeError(f"redis-cli --cluster create failed: {out}")
            wait_until(self._ok, 20, interval=0.1, message="cluster_state:ok on every node")
        except BaseException:
            self.stop()
            raise

    def _ok(self) -> bool:
        return all("cluster_state:ok" in _cli(n.port, "cluster", "info") for n in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelServers:
    """A primary, one replica of it and ``sentinels`` sentinels (quorum 1) that fail over to the
    replica ``down_after_ms`` after the primary stops answering. ``password``: the data nodes'
    (the URL carries it); ``sentinel_password``: the sentinels' ``requirepass``."""

    MASTER = "gwstate"

    def __init__(
        self,
        down_after_ms: int = 1000,
        *,
        sentinels: int = 1,
        password: str | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.down_after_ms = down_after_ms
        self.count = sentinels
        self.password = password
        self.sentinel_password = sentinel_password
        self.dir = Path(tempfile.mkdtemp(prefix="redis-sentinel-"))
        self.primary: _Node | None = None
        self.replica: _Node | None = None
        self.sentinel: _Node | None = None  # the first of `sentinels`
        self.sentinels: list[_Node] = []

    @property
    def url(self) -> str:
        assert self.sentinels
        auth = f":{self.password}@" if self.password is not None else ""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{auth}{hosts}/{self.MASTER}"

    def start(self) -> None:
        fast = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
        auth: tuple[str, ...] = ()
        if self.password is not None:  # masterauth too: after a failover each is a replica
            auth = ("--requirepass", self.password, "--masterauth", self.password)
        try:
            port = free_port()
            self.primary = _Node(
                _server_argv(port, self.dir, *fast, *auth), port, "redis-primary", _answers
            )
            replica_port = free_port()
            self.replica = _Node(
                _server_argv(
                    replica_port, self.dir, *fast, *auth, "--replicaof", "127.0.0.1", str(port)
                ),
                replica_port,
                "redis-replica",
                _answers,
            )
            wait_until(
                lambda: (
                    "master_link_status:up"
                    in _cli(
                        replica_port,
                        "info",
                        "replication",
                        password=self.password,
                    )
                ),
                15,
                interval=0.1,
                message="the replica to sync",
            )
            for n in range(self.count):
                self.sentinels.append(self._start_sentinel(port, n))
            self.sentinel = self.sentinels[0]
            wait_until(
                lambda: self.primary_port() == port,
                10,
                interval=0.1,
                message="the sentinel to name the primary",
            )
        except BaseException:
            self.stop()
            raise

    def _start_sentinel(self, primary_port: int, n: int) -> _Node:
        sentinel_port = free_port()
        conf = self.dir / f"sentinel-{n}.conf"
        lines = [
            f"port {sentinel_port}",
            "bind 127.0.0.1",
            f"dir {self.dir}",
            f"sentinel monitor {self.MASTER} 127.0.0.1 {primary_port} 1",
            f"sentinel down-after-milliseconds {self.MASTER} {self.down_after_ms}",
            f"sentinel failover-timeout {self.MASTER} 10000",
        ]
        if self.password is not None:
            lines.append(f"sentinel auth-pass {self.MASTER} {self.password}")
        if self.sentinel_password is not None:  # and how the sentinels talk to each other
            lines += [
                f"requirepass {self.sentinel_password}",
                f"sentinel sentinel-pass {self.sentinel_password}",
            ]
        conf.write_text("\n".join(lines) + "\n")
        return _Node(
            [_binary("redis-server"), str(conf), "--sentinel"],
            sentinel_port,
            "redis-sentinel",
            _answers,
        )

    def primary_port(self) -> int | None:
        assert self.sentinel is not None
        out = _cli(
            self.sentinel.port,
            "sentinel",
            "get-master-addr-by-name",
            self.MASTER,
            password=self.sentinel_password,
        ).split()
        return int(out[1]) if len(out) == 2 and out[1].isdigit() else None

    def kill_primary(self) -> None:
        assert self.primary is not None
        self.primary.kill()

    def stop(self) -> None:
        for node in (*self.sentinels, self.replica, self.primary):
            if node is not None:
                node.stop()
        self.primary = self.replica = self.sentinel = None
        self.sentinels = []
        shutil.rmtree(self.dir, ignore_errors=True)

"""The processes of one scenario: replica pools with faults enabled, Redis, one gateway.

Ports are chosen before anything starts, so the gateway config can be checked (``gateway
check-config``) first and a scenario whose config the gateway does not accept yet is skipped
without starting a process. Everything is started through `loadtests.stack.Stack` and stopped
by PID on close; paused (SIGSTOP) processes are resumed first so they can stop.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from loadtests.stack import ROOT, Proc, Stack, free_port, redis_server, stop

START_ATTEMPTS = 3  # a port picked free can be taken before the child binds it


@dataclass(frozen=True, slots=True)
class Topology:
    """Replica pools (pool name = model name on the replicas -> count) and optional Redis."""

    pools: tuple[tuple[str, int], ...]
    redis: bool = False
    accelerator: dict[str, Any] | None = None  # every pool's `accelerator:` section


def replica_id(pool: str, index: int) -> str:
    return f"{pool.removeprefix('digits-')}-{index}"


@dataclass
class Cluster:
    topology: Topology
    models: dict[str, Any]  # the gateway config's ``models`` section
    workers: int = 2  # the gateway's data-plane workers (``server.workers``)
    stack: Stack = field(default_factory=Stack)
    ports: dict[str, list[int]] = field(default_factory=dict)
    replicas: dict[str, list[Proc]] = field(default_factory=dict)
    redis_port: int | None = None
    redis: Proc | None = None
    gateway: Proc | None = None

    def __post_init__(self) -> None:
        for pool, count in self.topology.pools:
            self.ports[pool] = [free_port() for _ in range(count)]
        if self.topology.redis:
            self.redis_port = free_port()

    def config(self) -> dict[str, Any]:
        """The gateway config for the current ports (the server port is set by the stack)."""
        pools: dict[str, dict[str, Any]] = {
            pool: {
                "model": pool,
                "replicas": [
                    {"id": replica_id(pool, i), "url": f"http://127.0.0.1:{port}"}
                    for i, port in enumerate(ports)
                ],
            }
            for pool, ports in self.ports.items()
        }
        if self.topology.accelerator is not None:
            for section in pools.values():
                section["accelerator"] = dict(self.topology.accelerator)
        config: dict[str, Any] = {
            "pools": pools,
            "models": self.models,
            "server": {"workers": self.workers},
        }
        if self.redis_port is not None:
            config["state"] = {
                "backend": "redis",
                "redis_url": f"redis://127.0.0.1:{self.redis_port}/0",
                "sync_interval_s": 0.5,
            }
        return config

    def check_config(self) -> str | None:
        """None if ``gateway check-config`` accepts the config, else what it said."""
        path = self.stack.workdir / "check.yaml"
        path.write_text(yaml.safe_dump(self.config()))
        result = subprocess.run(
            [sys.executable, "-m", "gateway.cli", "check-config", str(path)],
            cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if result.returncode == 0:
            return None
        text = (result.stderr or result.stdout).strip()
        return text.splitlines()[-1] if text else f"exit code {result.returncode}"

    def start(self) -> Proc:
        """Start the replicas, Redis and the gateway; returns the gateway."""
        for pool, ports in self.ports.items():
            self.replicas[pool] = [self._start_replica(pool, i) for i in range(len(ports))]
        if self.redis_port is not None:
            self.redis = redis_server(self.stack, self.redis_port)
        self.gateway = self.stack.gateway(self.config())
        return self.gateway

    def _start_replica(self, pool: str, index: int, same_port: bool = False) -> Proc:
        for attempt in range(START_ATTEMPTS):
            try:
                port = self.ports[pool][index]
                return self.stack.replica(replica_id(pool, index), pool, port=port)
            except RuntimeError:
                if same_port or attempt == START_ATTEMPTS - 1:
                    raise
                self.ports[pool][index] = free_port()
        raise AssertionError("unreachable")

    def replica(self, pool: str, index: int) -> Proc:
        return self.replicas[pool][index]

    def signal_replica(self, pool: str, index: int, sig: signal.Signals) -> None:
        proc = self.replica(pool, index)
        if proc.process.poll() is None:
            os.kill(proc.pid, sig)

    def restart_replica(self, pool: str, index: int) -> Proc:
        """Stop the replica if it still runs (SIGTERM, graceful), start it on the same port."""
        old = self.replica(pool, index)
        self._resume(old)
        stop(old.process)
        self.replicas[pool][index] = self._start_replica(pool, index, same_port=True)
        return self.replicas[pool][index]

    def kill_redis(self) -> None:
        if self.redis is not None and self.redis.process.poll() is None:
            os.kill(self.redis.pid, signal.SIGKILL)
            self.redis.process.wait()

    def start_redis(self) -> None:
        if self.redis_port is not None:
            self.redis = redis_server(self.stack, self.redis_port)

    @staticmethod
    def _resume(proc: Proc) -> None:
        if proc.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)

    def logs(self) -> dict[str, Path]:
        return {p.name: p.log for p in self.stack.procs}

    def close(self) -> None:
        for proc in self.stack.procs:
            self._resume(proc)
        self.stack.close()

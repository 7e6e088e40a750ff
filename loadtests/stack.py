"""Starts local stacks for benchmarks and chaos runs: replicas, a gateway, nginx, by PID.

Every process started here is registered with a `Stack` and stopped by PID when the stack
closes (SIGTERM, a grace period, then SIGKILL), even when the run is interrupted. Replicas with
faults get the stack's fault key (``$REPLICA_FAULT_KEY``); `inject_faults` and `clear_faults`
send it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from replicas.fault_auth import FAULT_KEY_ENV, bearer

ROOT = Path(__file__).resolve().parents[1]
ADMIN_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    log: Path
    fault_key: str | None = None  # a replica started with --enable-faults: its /admin/faults key

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Stack:
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-stack-")))
    procs: list[Proc] = field(default_factory=list)
    fault_key: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)

    def start(
        self,
        name: str,
        argv: list[str],
        url: str,
        ready_path: str,
        fault_key: str | None = None,
        env: dict[str, str] | None = None,
        wrap: Sequence[str] = (),
        ready_timeout_s: float = 60.0,
        cwd: Path = ROOT,
    ) -> Proc:
        """``env``: variables added to this process's environment; ``wrap``: a command the
        process runs under (valgrind, say: its pid stays the process's); ``cwd``: where it
        runs (``python -m`` imports from there first)."""
        argv = [*wrap, *argv]
        log = self.workdir / f"{name}.log"
        extra = {**(env or {}), **({FAULT_KEY_ENV: fault_key} if fault_key else {})}
        env = {**os.environ, **extra} if extra else None
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        proc = Proc(name, process, url, log, fault_key)
        self.procs.append(proc)
        wait_http(proc, ready_path, ready_timeout_s)
        return proc

    def replica(self, name: str, model: str, port: int | None = None, faults: bool = True) -> Proc:
        port = port or free_port()
        argv = [
            sys.executable,
            "-m",
            "replicas.cli",
            "serve",
            "--model",
            str(ROOT / "models" / f"{model}.onnx"),
            "--name",
            model,
            "--port",
            str(port),
        ]
        if faults:
            argv.append("--enable-faults")
        url = f"http://127.0.0.1:{port}"
        return self.start(name, argv, url, "/v2/health/ready", self.fault_key if faults else None)

    def gateway(
        self,
        config: dict[str, Any],
        name: str = "gateway",
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
        **start: Any,
    ) -> Proc:
        """``args``: more ``gateway serve`` options; ``start``: `start`'s ``wrap``,
        ``ready_timeout_s`` and ``cwd`` (another checkout's gateway runs from there)."""
        port = free_port()
        server = config.setdefault("server", {})
        server["port"] = port
        server.setdefault("drain_s", 0)  # the stack stops its gateways at once, not after a drain
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), *args]
        return self.start(
            name, argv, f"http://127.0.0.1:{port}", "/v2/health/ready", env=env, **start
        )

    def nginx(self, upstreams: list[str], pinned: Sequence[str] = (), **start: Any) -> Proc | None:
        """``start``: `start`'s ``wrap`` and ``ready_timeout_s``; wrapped, nginx runs as one
        process (no master), so the wrapper sees the worker. ``pinned``: a command such as
        ``taskset`` that its master and worker run under, both."""
        binary = shutil.which("nginx") or next(
            (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.path.exists(p)), None
        )
        if binary is None:
            return None
        port = free_port()
        servers = "\n".join(f"    server {u.removeprefix('http://')};" for u in upstreams)
        conf = self.workdir / "nginx.conf"
        conf.write_text(NGINX_CONF.format(servers=servers, port=port, dir=self.workdir))
        single = " master_process off;" if start.get("wrap") else ""
        argv = [*pinned, binary, "-c", str(conf), "-p", str(self.workdir)]
        argv += ["-g", f"daemon off;{single}"]
        return self.start("nginx", argv, f"http://127.0.0.1:{port}", "/v2/health/ready", **start)

    def end(self, proc: Proc) -> None:
        """Stops one process of the stack now (by PID, as `close` does)."""
        stop(proc.process)
        self.procs.remove(proc)

    def close(self) -> None:
        for proc in reversed(self.procs):
            stop(proc.process)
        self.procs.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fault_request(proc: Proc, faults: dict[str, Any] | None) -> dict[str, Any]:
    if proc.fault_key is None:
        raise ValueError(f"{proc.name} was not started with faults")
    method = "POST" if faults is not None else "DELETE"
    return {
        "method": method,
        "url": f"{proc.url}/admin/faults",
        "json": faults,
        "headers": bearer(proc.fault_key),
        "timeout": ADMIN_TIMEOUT_S,
    }


def inject_faults(proc: Proc, **faults: Any) -> None:
    """POST /admin/faults with ``faults`` (latency_ms, error_rate, hang, corrupt_rate, ...)."""
    with httpx.Client(trust_env=False) as client:
        client.request(**_fault_request(proc, faults)).raise_for_status()


def clear_faults(proc: Proc) -> None:
    """DELETE /admin/faults: the replica is healthy again."""
    with httpx.Client(trust_env=False) as client:
        client.request(**_fault_request(proc, None)).raise_for_status()


async def inject_faults_async(proc: Proc, **faults: Any) -> None:
    async with httpx.AsyncClient(trust_env=False) as client:
        (await client.request(**_fault_request(proc, faults))).raise_for_status()


def stop(process: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_http(proc: Proc, path: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc.process.poll() is not None:
                raise RuntimeError(f"{proc.name} exited: {proc.log.read_text()[-2000:]}")
            try:
                if client.get(proc.url + path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"{proc.name} not ready after {timeout_s} s")


def cpu_seconds(*pids: int) -> float:
    """CPU time (user + system) of processes and their children, each counted once, from
    /proc (a gateway's control process and its workers, forked apart from it)."""
    counted = dict.fromkeys(candidate for pid in pids for candidate in [pid, *_children(pid)])
    return sum(own_cpu_seconds(candidate) for candidate in counted)


def own_cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of one process alone, its children not counted; 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pids(url: str) -> list[int]:
    """The PIDs of a ``gateway serve``'s data-plane workers (its ``/admin/state``): the
    processes that hold its clients' connections, bodies and answers."""
    doc = httpx.get(f"{url}/admin/state", timeout=5.0, trust_env=False).json()
    return [int(w["pid"]) for w in doc["workers"]["workers"]]


def rss_of(pids: Sequence[int]) -> int:
    """The resident set sizes of ``pids`` added up, in bytes (a process gone counts 0)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
    return total


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


class Served(Protocol):
    """What a pool's config needs of a replica: its id and its URL (a `Proc`, a peer)."""

    name: str
    url: str


def pool_config(replicas: Sequence[Served], model: str, **model_options: Any) -> dict[str, Any]:
    return {
        "pools": {
            "pool": {
                "model": model,
                "replicas": [{"id": p.name, "url": p.url} for p in replicas],
            }
        },
        "models": {"digits": {"pool": "pool", **model_options}},
    }


NGINX_CONF = """
worker_processes 1;
error_log {dir}/nginx-error.log warn;
pid {dir}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  upstream replicas {{
{servers}
    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"""


def redis_server(stack: Stack, port: int | None = None, name: str = "redis") -> Proc:
    """Starts ``redis-server`` on loopback with no persistence, registered with ``stack``.

    Chaos scenarios kill it by PID and start it again on the same port; its URL is the one a
    gateway config takes (``redis://127.0.0.1:PORT/0``).
    """
    binary = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/local/bin/redis-server") if os.path.exists(p)),
        None,
    )
    if binary is None:
        raise RuntimeError("redis-server not found (.ci/system-deps.sh installs it)")
    port = port or free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    log = stack.workdir / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=stack.workdir)
    proc = Proc(name, process, f"redis://127.0.0.1:{port}/0", log)
    stack.procs.append(proc)
    wait_redis(proc, port)
    return proc


def wait_redis(proc: Proc, port: int, timeout_s: float = 30.0) -> None:
    """Polls with PING until the server answers PONG, the process exits, or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.process.poll() is not None:
            raise RuntimeError(f"{proc.name} exited: {proc.log.read_text()[-2000:]}")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock,
        ):
            sock.sendall(b"PING\r\n")
            if sock.recv(64).startswith(b"+PONG"):
                return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.name} not answering PING after {timeout_s} s")


def raise_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so every ``finally`` (and `Stack.close`) runs."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)

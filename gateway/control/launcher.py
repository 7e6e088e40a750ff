"""Starts and stops the local replica processes that a config's pools ask for (`gateway up`).

Each replica is a ``replica serve`` child process, started in its own session so Ctrl-C reaches
the gateway first and the replicas are stopped in order, by PID: SIGTERM, a grace period, then
SIGKILL. On Linux each child also gets SIGKILL if this process dies without cleaning up.
While the gateway runs, `supervise` reaps a replica that exits (no zombie is left) and starts
it again after an exponential backoff (``RESTART_BASE_S`` doubling to ``RESTART_MAX_S``; reset
once it has stayed up ``STABLE_S``), logging each restart at WARNING and telling ``on_event``
(the gateway's timeline, so the dashboard shows a crash the probes may never see).
Pools with ``local.enable_faults`` need a fault key: ``$REPLICA_FAULT_KEY`` if set (the children
inherit it), else a new random key for this run, in a private file whose path is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc.aio

from gateway.config.models import GatewayConfig
from gateway.config.pool import PoolConfig
from gateway.config.replica import LocalLaunch, ReplicaConfig
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import Stub

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)
logging.getLogger("httpx").setLevel(logging.WARNING)

STOP_GRACE_S = 10.0
RESTART_BASE_S = 0.5
RESTART_MAX_S = 30.0
# up this long: the next crash starts the backoff again from the base
STABLE_S = 30.0
SUPERVISE_INTERVAL_S = 0.2
PR_SET_PDEATHSIG = 1
# read by `replica serve` (the gateway never imports it)
FAULT_KEY_ENV = "REPLICA_FAULT_KEY"
# what `replica serve` takes (replicas.fault_auth.MIN_KEY_CHARS)
MIN_FAULT_KEY_CHARS = 16


class LaunchError(Exception):
    """A local replica could not be started or never became ready."""


PORT_HINT = "change its port in the config (then `make run CONFIG=that.yaml`) or stop what listens"
GATEWAY_PORT_HINT = "`gateway up --port N` or server.port in the config, or stop what listens"
GRPC_PORT_HINT = (
    "`gateway up --grpc-port N` or server.grpc_port in the config, or stop what listens"
)


def address_in_use(host: str, port: int) -> bool:
    """Whether ``host:port`` cannot be bound because something listens there (as uvicorn
    binds: SO_REUSEADDR, so a closed socket's TIME_WAIT does not count)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError:
        # an unresolvable host fails at bind with its own message
        return False
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def port_taken(what: str, host: str, port: int, hint: str = PORT_HINT) -> LaunchError | None:
    """The error that says ``what`` cannot listen on ``host:port``, or None if it can."""
    if not address_in_use(host, port):
        return None
    return LaunchError(f"{what}: address {host}:{port} is already in use ({hint})")


def refuse_taken(what: str, host: str, port: int, hint: str = PORT_HINT) -> None:
    """`LaunchError` if ``host:port`` is taken (`port_taken`)."""
    taken = port_taken(what, host, port, hint)
    if taken is not None:
        raise taken


def refuse_gateway_ports(host: str, port: int, grpc_port: int | None) -> None:
    """`LaunchError` if the gateway's HTTP port or its gRPC door's port is taken: said before
    any replica starts, not by a server that exits after they have."""
    refuse_taken("the gateway", host, port, GATEWAY_PORT_HINT)
    if grpc_port is not None:
        refuse_taken("the gateway's gRPC door", host, grpc_port, GRPC_PORT_HINT)


@dataclass
class LocalReplica:
    replica: ReplicaConfig
    process: subprocess.Popen[bytes]
    argv: list[str] = field(default_factory=list)
    started_at: float = 0.0
    # in a row (reset once it stays up STABLE_S)
    crashes: int = 0
    restarts: int = 0
    # exited: when it is started again
    restart_at: float | None = None

    @property
    def pid(self) -> int:
        return self.process.pid


def restart_delay(crashes: int) -> float:
    """The wait before restarting a replica that exited ``crashes`` times in a row (>= 1)."""
    return min(RESTART_MAX_S, RESTART_BASE_S * 2.0 ** (crashes - 1))


def replica_argv(
    pool: PoolConfig,
    replica: ReplicaConfig,
    launch: LocalLaunch,
    fault_key_file: Path | None = None,
) -> list[str]:
    endpoint = replica.endpoint
    # a grpc:// replica serves V2 gRPC on its URL's port, and REST on any free port
    ports = (
        ["--port", "0", "--grpc-port", str(endpoint.port)]
        if endpoint.is_grpc
        else ["--port", str(endpoint.port)]
    )
    argv = [
        sys.executable,
        "-m",
        "replicas.cli",
        "serve",
        "--model",
        launch.model_path,
        "--name",
        pool.model,
        "--version",
        pool.version or "1",
        "--host",
        endpoint.host,
        *ports,
        "--device",
        launch.device,
    ]
    if launch.enable_faults:
        argv.append("--enable-faults")
        if fault_key_file is not None:
            argv += ["--fault-key-file", str(fault_key_file)]
    return argv


async def _ready(client: httpx.AsyncClient, url: str, replica: ReplicaConfig) -> bool:
    """One readiness check: REST ``/v2/health/ready``, or gRPC ``ServerReady`` for grpc://."""
    import httpx

    endpoint = replica.endpoint
    if not endpoint.is_grpc:
        try:
            return (await client.get(url, timeout=1.0)).status_code == 200
        except httpx.HTTPError:
            return False
    async with grpc.aio.insecure_channel(endpoint.authority) as channel:
        try:
            reply = await Stub(channel).server_ready(pb.ServerReadyRequest(), timeout=1.0)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.ready)


def fault_key_file(environ: Mapping[str, str], directory: str | None = None) -> Path | None:
    """A new key in a file only this user can read, or None where ``$REPLICA_FAULT_KEY`` is set.

    The key itself is never logged, and never on a command line (``ps`` shows those). A set
    key shorter than the replicas take (`MIN_FAULT_KEY_CHARS`) is a `LaunchError` here, before
    any replica starts and refuses it.
    """
    chosen = environ.get(FAULT_KEY_ENV, "").strip()
    if 0 < len(chosen) < MIN_FAULT_KEY_CHARS:
        raise LaunchError(
            f"${FAULT_KEY_ENV} has {len(chosen)} characters; the replicas need at least "
            f"{MIN_FAULT_KEY_CHARS} (e.g. openssl rand -hex 16)"
        )
    if chosen:
        log.info("fault injection on: /admin/faults takes the key in $%s", FAULT_KEY_ENV)
        return None
    # mode 0600
    fd, name = tempfile.mkstemp(prefix="replica-fault-key-", dir=directory)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32) + "\n")
    log.warning(
        "fault injection on: /admin/faults takes 'Authorization: Bearer $(cat %s)' "
        "(a new key for this run; set $%s to choose one)",
        name,
        FAULT_KEY_ENV,
    )
    return Path(name)


def _popen(argv: list[str]) -> subprocess.Popen[bytes]:
    """A replica in its own session (Ctrl-C reaches the gateway only), killed with us."""
    return subprocess.Popen(argv, start_new_session=True, preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# (replica id, what happened, level)
SupervisorEvent = Callable[[str, str, str], None]


def _no_event(replica: str, detail: str, level: str) -> None:
    """Where supervisor events go until the gateway's timeline takes them."""


class Launcher:
    def __init__(self, config: GatewayConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self.replicas: list[LocalReplica] = []
        self.fault_key_file: Path | None = None
        # exits and restarts, for the timeline
        self.on_event: SupervisorEvent = _no_event

    def check(self) -> None:
        for name, pool in self._config.pools.items():
            if pool.local and not Path(pool.local.model_path).is_file():
                raise LaunchError(
                    f"pools.{name}.local.model_path: {pool.local.model_path} does not exist "
                    "(build the models with `replica build-models`)"
                )
            for replica in pool.replicas if pool.local else ():
                # said now, not as "exited
                # with code 3" after the replica's own log line
                where = replica.endpoint
                refuse_taken(f"replica {replica.id}", where.host, where.port)

    def spawn(self) -> None:
        """Starts every local replica process; `wait_ready` then waits for them."""
        self.check()
        local = [p.local for p in self._config.pools.values() if p.local is not None]
        if any(launch.enable_faults for launch in local):
            self.fault_key_file = fault_key_file(os.environ)
        for pool in self._config.pools.values():
            if pool.local is None:
                continue
            for replica in pool.replicas:
                argv = replica_argv(pool, replica, pool.local, self.fault_key_file)
                process = _popen(argv)
                self.replicas.append(LocalReplica(replica, process, argv, self._clock()))
                log.info("started replica %s (pid %d) on %s", replica.id, process.pid, replica.url)

    async def supervise(self, interval_s: float = SUPERVISE_INTERVAL_S) -> None:
        """Reaps and restarts exited replicas until cancelled."""
        while True:
            self.check_children()
            await asyncio.sleep(interval_s)

    def check_children(self) -> None:
        """One round: reap what exited (scheduling its restart), start what is due."""
        now = self._clock()
        for local in self.replicas:
            if local.restart_at is not None:
                if now >= local.restart_at:
                    local.process = _popen(local.argv)
                    local.started_at, local.restart_at = now, None
                    local.restarts += 1
                    log.warning(
                        "restarted replica %s (pid %d; restart %d)",
                        local.replica.id,
                        local.pid,
                        local.restarts,
                    )
                    self.on_event(
                        local.replica.id,
                        f"restarted (pid {local.pid}; restart {local.restarts})",
                        "warn",
                    )
                continue
            # reaps it if it exited
            code = local.process.poll()
            if code is None:
                if now - local.started_at >= STABLE_S:
                    local.crashes = 0
                continue
            local.crashes += 1
            delay = restart_delay(local.crashes)
            local.restart_at = now + delay
            log.warning(
                "replica %s (pid %d) exited with code %s; restarting in %.1f s",
                local.replica.id,
                local.pid,
                code,
                delay,
            )
            self.on_event(
                local.replica.id,
                f"exited with code {code}; restart {local.restarts + 1} in {delay:.1f} s",
                "bad",
            )

    async def wait_ready(self) -> None:
        # only `gateway up` waits on replicas: `serve` starts without httpx
        import httpx

        async with httpx.AsyncClient(trust_env=False) as client:
            await asyncio.gather(*(self._wait_one(client, r) for r in self.replicas))

    async def _wait_one(self, client: httpx.AsyncClient, local: LocalReplica) -> None:
        pool = next(p for p in self._config.pools.values() if local.replica in p.replicas)
        timeout = pool.local.startup_timeout_s if pool.local else 60.0
        deadline = asyncio.get_running_loop().time() + timeout
        url = f"{local.replica.url}/v2/health/ready"
        while asyncio.get_running_loop().time() < deadline:
            if local.process.poll() is not None:
                where = local.replica.endpoint
                taken = port_taken(f"replica {local.replica.id}", where.host, where.port)
                raise taken or LaunchError(
                    f"replica {local.replica.id} exited with code {local.process.returncode} "
                    "before it was ready (its log lines above say why)"
                )
            if await _ready(client, url, local.replica):
                return
            await asyncio.sleep(0.1)
        raise LaunchError(f"replica {local.replica.id} not ready after {timeout:.0f} s")

    def stop(self) -> None:
        """SIGTERM to every replica by PID, SIGKILL after ``STOP_GRACE_S``; all reaped."""
        for local in self.replicas:
            if local.process.poll() is None:
                local.process.send_signal(signal.SIGTERM)
        # one grace period for all of them
        deadline = time.monotonic() + STOP_GRACE_S
        for local in self.replicas:
            try:
                local.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning(
                    "replica %s ignored SIGTERM; killing pid %d", local.replica.id, local.pid
                )
                local.process.kill()
                local.process.wait()
        self.replicas.clear()
        if self.fault_key_file is not None:
            self.fault_key_file.unlink(missing_ok=True)
            self.fault_key_file = None

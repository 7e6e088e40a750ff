"""``gateway serve`` and ``gateway up``: the gateway's server built from a config, and run.

``up`` is the main job for a newcomer (local replicas + gateway, stopped together on Ctrl-C);
``serve`` runs only the gateway, against replicas that already exist anywhere. Both drain on
SIGTERM/SIGINT and exit 0 (`gateway.server`); ``up`` restarts a local replica that exits and
stops its replicas on every way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn
import uvloop

from gateway.api.app import GatewayApp
from gateway.config import ConfigError, GatewayConfig
from gateway.config.connections import door_connections
from gateway.config.loader import read_config
from gateway.control.banner import announce_when_listening, banner
from gateway.control.forks import ForkServer
from gateway.control.launcher import Launcher
from gateway.control.plane import WORKER_PREFIX_ENV, ControlPlane
from gateway.control.preflight import config_problems
from gateway.control.runtime import Gateway
from gateway.control.sockets import reserve_port, rest_listener
from gateway.control.worker_count import chosen_workers
from gateway.memory.heap_trim import return_large_buffers_to_the_os
from gateway.server import GatewayServer
from gateway.telemetry.logging import configure_logging

DEFAULT_CONFIG = "config/local.yaml"
# `gateway up` serves gRPC here unless told otherwise (Triton's convention)
UP_GRPC_PORT = 8001
log = logging.getLogger("gateway")


@dataclass
class Control:
    """A control process about to serve: its server (FastAPI on the private admin socket) and
    its data plane (the workers, the link), with the ports it bound for them."""

    server: GatewayServer
    plane: ControlPlane
    rest: socket.socket
    grpc: socket.socket | None
    run_dir: Path
    forks: ForkServer | None

    @property
    def rest_port(self) -> int:
        return int(self.rest.getsockname()[1])

    def close(self) -> None:
        """The ports and the run directory go (once the server has stopped)."""
        self.rest.close()
        if self.grpc is not None:
            self.grpc.close()
        if self.forks is not None:
            self.forks.close()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _control(
    config: GatewayConfig,
    text: str,
    args: argparse.Namespace,
    grpc_port: int | None,
) -> Control:
    """The control process's server and workers, not yet started, its ports bound (a port in
    use fails here, before anything starts); `ConfigError` in protected mode
    (`refuse_unprotected`) or where a file or fallback the config names is missing
    (`config_problems`). ``grpc_port``: the workers' gRPC door (None: no gRPC door)."""
    path = args.config
    _refuse_problems(path or "<config>", config)
    return_large_buffers_to_the_os()
    _raise_fd_limit(config)
    # forked before this process has a descriptor, a thread or a loop of its own
    forks = None if os.environ.get(WORKER_PREFIX_ENV) else ForkServer.start()
    try:
        return _bound(config, text, args, grpc_port, forks)
    except BaseException:
        if forks is not None:
            forks.close()
        raise


def _bound(
    config: GatewayConfig,
    text: str,
    args: argparse.Namespace,
    grpc_port: int | None,
    forks: ForkServer | None,
) -> Control:
    path = args.config
    bind_host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    workers = chosen_workers(args.workers, config.server.workers)
    rest = rest_listener(bind_host, port)
    grpc = None
    try:
        if grpc_port is not None:
            grpc = reserve_port(bind_host, grpc_port)
            grpc_port = int(grpc.getsockname()[1])
    except BaseException:
        rest.close()
        raise
    # mode 0700: this user's only
    run_dir = Path(tempfile.mkdtemp(prefix="gateway-"))
    gateway = Gateway(config)
    app = GatewayApp(gateway, config_path=path, bind_host=bind_host, config_text=text, parses=False)
    plane = ControlPlane(
        gateway,
        run_dir,
        workers,
        rest,
        text,
        str(Path(path).absolute().parent),
        grpc=None if grpc_port is None else (bind_host, grpc_port),
        forks=forks,
    )
    app.on_reload.append(plane.reloaded)
    app.barrier = plane.barrier
    server = GatewayServer(
        uvicorn.Config(
            app,
            # the workers proxy every control-plane URL here
            uds=str(plane.admin_socket),
            loop="uvloop",
            http="httptools",
            lifespan="on",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            # uvicorn's lines go through the gateway's (JSON) handler
            log_config=None,
            log_level="info",
            # set from the models' deadlines when draining
            timeout_graceful_shutdown=10,
        ),
        app,
        path,
        plane=plane,
    )
    return Control(server, plane, rest, grpc, run_dir, forks)


def _raise_fd_limit(config: GatewayConfig) -> None:
    """Raises the soft limit on open file descriptors to the hard limit, and logs what each
    door may hold (`gateway.config.connections`): a service's soft limit is often far below
    what the hard limit allows, and every client and upstream connection is a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = soft
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            now = hard
        except (OSError, ValueError) as exc:
            # a hard limit above what the kernel allows
            log.warning("file descriptors: soft limit %s not raised: %s", _shown(soft), exc)
    how = f"raised from {_shown(soft)}" if now != soft else "not raised"
    log.info(
        "file descriptors: soft limit %s (%s; hard limit %s); each door holds up to %d "
        "connections at once (server.max_connections)",
        _shown(now),
        how,
        _shown(hard),
        door_connections(config),
    )


def _shown(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)


def _refuse_problems(path: str, config: GatewayConfig) -> None:
    problems = config_problems(config)
    if problems:
        raise ConfigError("\n".join(f"{path}: {p}" for p in problems))


def _logging(config: GatewayConfig) -> None:
    configure_logging(json=config.log.json_lines, level=config.log.level)
    logging.getLogger("httpx").setLevel(logging.WARNING)


def serve(args: argparse.Namespace) -> int:
    text, config = read_config(args.config)
    _logging(config)
    grpc_port = args.grpc_port if args.grpc_port is not None else config.server.grpc_port
    control = _control(config, text, args, grpc_port)
    try:
        control.server.run()
    finally:
        control.close()
    return 0


def up(args: argparse.Namespace) -> int:
    text, config = read_config(args.config)
    _logging(config)
    launcher = Launcher(config)
    grpc_port = args.grpc_port if args.grpc_port is not None else config.server.grpc_port
    grpc_port = UP_GRPC_PORT if grpc_port is None else grpc_port
    # its ports bound before any spawn
    control = _control(config, text, args, grpc_port)
    server = control.server
    host = args.host or config.server.host

    async def run() -> None:
        with _cancel_on_signals():
            # until the server takes the signals over
            await launcher.wait_ready()
        log.info("%d local replica(s) ready; starting the gateway", len(launcher.replicas))
        # exits and restarts to the timeline of the gateway of the moment (a reload replaces it)
        launcher.on_event = lambda *event: server.app.gateway.history.supervisor(*event)
        supervisor = asyncio.create_task(launcher.supervise(), name="replica-supervisor")
        text = banner(config, host, control.rest_port, len(launcher.replicas), grpc_port)
        # every worker serves (and the control's own server)
        serving = control.plane.serving
        announcer = asyncio.create_task(announce_when_listening(serving, text))
        try:
            await server.serve()
        finally:
            supervisor.cancel()
            announcer.cancel()
            await asyncio.gather(supervisor, announcer, return_exceptions=True)

    try:
        launcher.spawn()
        uvloop.run(run())
    except (KeyboardInterrupt, asyncio.CancelledError):
        log.warning("stopped before the gateway started")
    finally:
        launcher.stop()
        control.close()
    return 0


@contextlib.contextmanager
def _cancel_on_signals() -> Iterator[None]:
    """SIGTERM/SIGINT cancel the current task (so ``finally`` blocks run), for the block."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        yield
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)

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
import resource
import signal
from collections.abc import Iterator

import uvicorn
import uvloop

from gateway.api.app import GatewayApp
from gateway.banner import announce_when_listening, banner
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.config.connections import door_connections
from gateway.launcher import Launcher, refuse_gateway_ports
from gateway.policies.heap_trim import return_large_buffers_to_the_os
from gateway.preflight import config_problems
from gateway.runtime import Gateway
from gateway.server import GatewayServer
from gateway.server.protocol import ClientLimits, guarded_protocol
from gateway.telemetry.logging import configure_logging

DEFAULT_CONFIG = "config/local.yaml"
UP_GRPC_PORT = 8001  # `gateway up` serves gRPC here unless told otherwise (Triton's convention)
log = logging.getLogger("gateway")


def _server(
    config: GatewayConfig,
    host: str | None,
    port: int | None,
    path: str | None = None,
    grpc_port: int | None = None,
) -> GatewayServer:
    """The server, not yet listening; `ConfigError` in protected mode (`refuse_unprotected`)
    or where a file or fallback the config names is missing (`config_problems`).
    ``grpc_port``: the gRPC door's port (None: no gRPC door)."""
    _refuse_problems(path or "<config>", config)
    return_large_buffers_to_the_os()
    _raise_fd_limit(config)
    bind_host = host or config.server.host
    app = GatewayApp(Gateway(config), config_path=path, bind_host=bind_host)
    server = config.server
    limits = ClientLimits(server.max_header_bytes, server.header_timeout_s, server.body_timeout_s)
    return GatewayServer(
        uvicorn.Config(
            app,
            host=bind_host,
            port=port if port is not None else config.server.port,
            loop="uvloop",
            http=guarded_protocol(limits),  # httptools, with head size and read timeouts
            lifespan="on",
            access_log=False,
            proxy_headers=False,
            server_header=False,
            log_config=None,  # uvicorn's lines go through the gateway's (JSON) handler
            log_level="info",
            timeout_graceful_shutdown=10,  # set from the models' deadlines when draining
        ),
        app,
        path,
        grpc_port,
    )


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
        except (OSError, ValueError) as exc:  # a hard limit above what the kernel allows
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
    config = load_config(args.config)
    _logging(config)
    grpc_port = args.grpc_port if args.grpc_port is not None else config.server.grpc_port
    _server(config, args.host, args.port, args.config, grpc_port).run()
    return 0


def up(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    _logging(config)
    launcher = Launcher(config)
    grpc_port = args.grpc_port if args.grpc_port is not None else config.server.grpc_port
    grpc_port = UP_GRPC_PORT if grpc_port is None else grpc_port
    server = _server(config, args.host, args.port, args.config, grpc_port)  # before any spawn
    refuse_gateway_ports(server.config.host, server.config.port, grpc_port)

    async def run() -> None:
        with _cancel_on_signals():  # until the server takes the signals over
            await launcher.wait_ready()
        log.info("%d local replica(s) ready; starting the gateway", len(launcher.replicas))
        # exits and restarts to the timeline of the gateway of the moment (a reload replaces it)
        launcher.on_event = lambda *event: server.app.gateway.history.supervisor(*event)
        supervisor = asyncio.create_task(launcher.supervise(), name="replica-supervisor")
        text = banner(config, server.config, len(launcher.replicas), grpc_port)
        announcer = asyncio.create_task(announce_when_listening(lambda: server.started, text))
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

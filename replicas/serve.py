"""Run a `ReplicaApp` under uvicorn (uvloop + httptools) with a draining shutdown, and with
``grpc_port`` its V2 gRPC service too (`replicas.grpc_server`), in the same event loop. The
GPU's health is read through NVML in a thread of its own (`replicas.accelerator_nvml`) for
``/metrics``; without one, ``/metrics`` says there is none.

On SIGTERM or SIGINT readiness turns false at once, uvicorn stops accepting connections, lets
in-flight requests finish (bounded by ``graceful_timeout_s``), and the process exits 0, so a
supervisor or a gateway sees an orderly stop rather than a crash.
"""

from __future__ import annotations

import logging
import random
import signal
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import grpc
import uvicorn
from uvicorn._compat import asyncio_run

from replicas.accelerator import Accelerator
from replicas.accelerator_nvml import DEFAULT_INTERVAL_S, start_accelerator
from replicas.fault_auth import FaultKey
from replicas.faults import FaultInjector
from replicas.grpc_server import grpc_server
from replicas.model import Device
from replicas.server import MAX_BODY_BYTES, ReplicaApp

log = logging.getLogger("replicas.serve")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    model: Path
    name: str
    port: int
    version: str = "1"
    host: str = "127.0.0.1"
    device: Device = "cpu"
    threads: int = 1
    fault_key: FaultKey | None = None  # fault injection on, guarded by this key; None: off
    fault_seed: int | None = None
    graceful_timeout_s: int = 30
    log_level: str = "info"
    ssl_certfile: Path | None = None  # with ssl_keyfile: serve HTTPS
    ssl_keyfile: Path | None = None
    ssl_ca_certs: Path | None = None  # require client certificates signed by these (mTLS)
    grpc_port: int | None = None  # also serve V2 gRPC here (0: any free port); TLS as above
    gpu_index: int | None = 0  # the GPU whose health /metrics reports (NVML); None: off
    accelerator_interval_s: float = DEFAULT_INTERVAL_S


class DrainingServer(uvicorn.Server):
    """uvicorn's server, but readiness turns false the moment a stop signal arrives."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def serve(options: ServeOptions) -> None:
    """Serve until stopped by a signal; returns after a graceful shutdown."""
    faults = None
    if options.fault_key is not None:
        faults = FaultInjector(random.Random(options.fault_seed))
    accelerator, sampler = start_accelerator(options.gpu_index, options.accelerator_interval_s)
    try:
        _serve(options, faults, accelerator)
    finally:
        if sampler is not None:
            sampler.stop()


def _serve(options: ServeOptions, faults: FaultInjector | None, accelerator: Accelerator) -> None:
    app = ReplicaApp(
        options.model,
        name=options.name,
        version=options.version,
        device=options.device,
        threads=options.threads,
        faults=faults,
        fault_key=options.fault_key,
        accelerator=accelerator,
    )
    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_config=None,  # uvicorn's lines go through the replica's (JSON) handler
        proxy_headers=False,  # loopback behind the gateway: no X-Forwarded-* to trust
        server_header=False,
        log_level=options.log_level,
        timeout_graceful_shutdown=options.graceful_timeout_s,
        ssl_certfile=options.ssl_certfile,
        ssl_keyfile=options.ssl_keyfile,
        ssl_ca_certs=options.ssl_ca_certs,
        ssl_cert_reqs=ssl.CERT_REQUIRED if options.ssl_ca_certs else ssl.CERT_NONE,
    )
    # uvicorn restores the previous handlers and re-raises the signal after its graceful
    # shutdown; these turn that (or a signal before uvicorn starts) into a clean exit 0.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    signal.signal(signal.SIGINT, _exit_cleanly)
    server = DrainingServer(config, on_exit=app.begin_shutdown)
    if options.grpc_port is None:
        server.run()
        return
    try:
        asyncio_run(_serve_both(server, app, options), loop_factory=config.get_loop_factory())
    except OSError as exc:
        print(f"replica: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def grpc_credentials(options: ServeOptions) -> grpc.ServerCredentials | None:
    """The gRPC port's TLS: the REST port's certificate, key and client CAs (mTLS)."""
    if options.ssl_certfile is None or options.ssl_keyfile is None:
        return None
    pair = (options.ssl_keyfile.read_bytes(), options.ssl_certfile.read_bytes())
    cas = options.ssl_ca_certs.read_bytes() if options.ssl_ca_certs else None
    return grpc.ssl_server_credentials([pair], cas, require_client_auth=cas is not None)


async def _serve_both(server: DrainingServer, app: ReplicaApp, options: ServeOptions) -> None:
    """uvicorn and the gRPC server in one loop; on a stop signal both drain (uvicorn first,
    then gRPC's in-flight calls get the same grace), and readiness is false on both at once."""
    assert options.grpc_port is not None
    grpc_srv, port = grpc_server(
        app,
        f"{options.host}:{options.grpc_port}",
        credentials=grpc_credentials(options),
        max_message_bytes=MAX_BODY_BYTES,
    )
    await grpc_srv.start()
    log.info("V2 gRPC on %s:%d", options.host, port)
    try:
        await server.serve()
    finally:
        await grpc_srv.stop(options.graceful_timeout_s)

"""A data-plane worker process: ``python -m gateway.worker``, started by its control process.

    control process ── spawns (`gateway.control.supervisor`) ──► this process
        inherits the REST listening socket (``--rest-fd``); reads its index on a pipe
        (``--index-fd``: `gateway.control.standby`) or is given it (``--index``)
        ── the link (``RUN_DIR/control.sock``) ──► Hello; Welcome (the config's text); Snapshots
        ◄── Batches of outcomes, at the shipper's pace

It serves the REST door on the lean server (`gateway.worker.rest`; every other URL is proxied
to the control process's own server on ``RUN_DIR/admin.sock``) and, with ``--grpc-port``, the
gRPC door on that port (several workers bind it with ``SO_REUSEPORT``). Nothing else runs on
its loop. Without its control process (hung, or gone) it keeps serving on the last snapshot,
which turns stale after `STALE_S`, and its link reconnects. SIGTERM (its control stopping it):
no new connections, requests in flight finished within the longest deadline a model allows,
then exit 0. A control process that refuses it (another protocol version): exit 3.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import random
import signal
import socket
import sys
import time
from collections.abc import Awaitable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

from gateway.api.parsing import RequestParser
from gateway.api.tenants import HEADERS as TENANT_HEADERS
from gateway.call_count import install as install_call_count
from gateway.clock import MonotonicClock
from gateway.config.connections import door_connections
from gateway.config.loader import ConfigError, config_from_text
from gateway.config.models import GatewayConfig
from gateway.memory.heap_trim import HeapTrim, return_large_buffers_to_the_os
from gateway.memory.inflight_bytes import InflightBytes
from gateway.pipeline.edge import HEADERS as EDGE_HEADERS
from gateway.rollout.handover import promoted_config
from gateway.snapshot.link_client import LinkClient
from gateway.snapshot.messages import (
    PROTOCOL,
    Batch,
    ControlMessage,
    Drain,
    Flush,
    Gauges,
    Hello,
    Loads,
    Refused,
    Reload,
    Snapshot,
    Stop,
    Welcome,
)
from gateway.snapshot.shipper import BatchShipper
from gateway.telemetry.logging import configure_logging
from gateway.worker.app import WorkerApp
from gateway.worker.control_client import ControlClient
from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.proxy import UnixProxy
from gateway.worker.http.server import HttpServer
from gateway.worker.rest import RestDoor
from gateway.worker.runtime import WorkerRuntime

log = logging.getLogger("gateway.worker")

WELCOME_TIMEOUT_S = 30.0
STALE_S = 3.0
DRAIN_SLACK_S = 1.0
FRAMING_BYTES = 64 * 1024
LINGER_S = 10.0
# what chunked framing may add to a body the edge bounds
LINGER_BYTES = 64 * 1024 * 1024
# the exit status when the control process refuses this worker
REFUSED = 3
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def main(argv: list[str] | None = None) -> int:
    args = _arguments().parse_args(argv)
    # no child of this worker (a parse process) keeps it
    os.set_inheritable(args.rest_fd, False)
    index = args.index if args.index_fd is None else _read_index(args.index_fd)
    if index is None:
        # a standby no longer needed
        return 0
    configure_logging(json=True, level="INFO")
    return uvloop.run(Worker(args, index).run())


def _arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway.worker")
    parser.add_argument("--run-dir", required=True, help="the control process's run directory")
    parser.add_argument("--index", type=int, default=None, help="this worker's index")
    parser.add_argument("--index-fd", type=int, default=None, help="a pipe to read it from")
    parser.add_argument("--rest-fd", type=int, required=True, help="the REST listening socket")
    parser.add_argument("--grpc-host", default=None, help="where the gRPC door listens")
    parser.add_argument("--grpc-port", type=int, default=None, help="(none: no gRPC door)")
    return parser


def _read_index(fd: int) -> int | None:
    """The index its control process writes on the pipe (`gateway.control.standby`)."""
    data = b""
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(64):
            data += chunk
    text = data.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


class Worker:
    def __init__(self, args: argparse.Namespace, index: int) -> None:
        self._args = args
        self.index = index
        self._run_dir = Path(args.run_dir)
        self._clock = MonotonicClock()
        self._welcome: asyncio.Future[Welcome] | None = None
        self._latest: Snapshot | None = None
        self._app: WorkerApp | None = None
        self._config_version = 0
        self._workers = 1
        self._stopping: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # the last reload, under way or done
        self._reloading: asyncio.Task[None] | None = None

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        self._welcome = loop.create_future()
        self._stopping = asyncio.Event()
        return_large_buffers_to_the_os()
        self.shipper = BatchShipper(
            self._clock, self._ship, worker=self.index, gauges=self._gauges, stale=self._stale
        )
        self.link = LinkClient(
            str(self._run_dir / "control.sock"),
            self._hello,
            self._message,
            clock=self._clock,
            rng=random.Random(),
            stale_s=STALE_S,
        )
        self.link.start()
        try:
            welcome = await asyncio.wait_for(asyncio.shield(self._welcome), WELCOME_TIMEOUT_S)
        except TimeoutError:
            waited = WELCOME_TIMEOUT_S
            log.error("worker %d: no word from the control process in %g s", self.index, waited)
            await self.link.stop()
            return REFUSED
        except RefusedByControl as exc:
            log.error("worker %d: refused by the control process: %s", self.index, exc)
            await self.link.stop()
            return REFUSED
        config = self._config(welcome.config_text, welcome.config_dir, welcome.promoted)
        self._workers = welcome.workers
        self._config_version = welcome.config_version
        configure_logging(json=config.log.json_lines, level=config.log.level)
        await self._serve(config)
        return 0

    async def _serve(self, config: GatewayConfig) -> None:
        runtime = self._runtime(config)
        await runtime.start()
        server = config.server
        parser = RequestParser(
            server.parse_inline_max_bytes,
            server.parse_offload,
            server.parse_processes,
            server.parse_fast_inline_max_bytes,
        )
        await parser.start()
        memory = InflightBytes.from_config(runtime.config.server, HeapTrim().soon)
        control = ControlClient(str(self._run_dir / "admin.sock"))
        app = self._app = WorkerApp(runtime, parser, memory, control)
        if self._latest is not None:
            app.follow(self._latest)
        proxy = UnixProxy(str(self._run_dir / "admin.sock"), clock=runtime.clock)
        http = HttpServer(
            RestDoor(app).routes(proxy),
            _client_limits(config),
            wanted_headers=(*EDGE_HEADERS, *TENANT_HEADERS),
        )
        await http.start(sock=socket.socket(fileno=self._args.rest_fd))
        grpc = None
        if self._args.grpc_port is not None:
            # grpcio and the door's stubs cost a worker's start more than half a second of
            # imports; a gateway without a gRPC port does not pay them
            from gateway.grpc_door.server import GrpcDoor

            host = self._args.grpc_host or server.host
            grpc = GrpcDoor(app, host, self._args.grpc_port, reuse_port=True)
            grpc.bind()
            await grpc.start()
        self.shipper.start()
        _settle_garbage_collector()
        # $GATEWAY_CALL_COUNT
        if install_call_count(asyncio.get_running_loop(), self._settle) is not None:
            # A busy shipper looks at its lists every `check_s`: work per second while
            # requests come, not per request, which a slow machine's longer window would
            # count as the requests'. Counted, it wakes only to ship, as it does idle, and the
            # idle window's rate takes that off.
            self.shipper.check_s = self.shipper.interval_s
        loop = asyncio.get_running_loop()
        assert self._stopping is not None
        loop.add_signal_handler(signal.SIGTERM, self._stopping.set)
        # Ctrl-C is the control's to act on
        loop.add_signal_handler(signal.SIGINT, lambda: None)
        log.info("worker %d serving (pid %d)", self.index, os.getpid())
        await self._stopping.wait()
        grace = _grace(app.gateway.config)
        log.info("worker %d stopping: requests in flight get %.1f s", self.index, grace)
        app.gateway.drain()
        stops: list[Awaitable[object]] = [http.drain(grace)]
        if grpc is not None:
            stops.append(grpc.stop(grace))
        await asyncio.gather(*stops, return_exceptions=True)
        await self.shipper.stop()
        await self.link.stop()
        await app.stop()
        await parser.close()
        proxy.pool.close()

    def _runtime(self, config: GatewayConfig) -> WorkerRuntime:
        return WorkerRuntime(
            config, self.shipper, worker=self.index, workers=self._workers, clock=self._clock
        )

    def _config(self, text: str, directory: str, promoted: tuple[str, ...]) -> GatewayConfig:
        """The config the control process runs: its text, as if read beside ``directory``,
        with the ``promoted`` models handed over as the control handed them."""
        config = config_from_text(text, Path(directory) / "<config>")
        return promoted_config(config, list(promoted)) if promoted else config

    # --- the link -----------------------------------------------------------------------

    def _hello(self) -> Hello:
        return Hello(PROTOCOL, self.index, os.getpid(), self._config_version)

    def _message(self, message: ControlMessage) -> None:
        if isinstance(message, Snapshot):
            self._snapshot(message)
        elif isinstance(message, Loads):
            if self._app is not None:
                self._app.follow_loads(message)
        elif isinstance(message, Reload):
            self._reloading = self._spawn(self._reload(message))
        elif isinstance(message, Flush):
            self._flush(message.token)
        elif isinstance(message, Stop):
            self._stop()
        elif isinstance(message, Drain):
            self._drain(message.reason)
        else:
            # Welcome or Refused: the answer to this worker's Hello
            self._answered(message)

    def _flush(self, token: int) -> None:
        """Ships now; after a reload under way, once it is done (it was asked before)."""
        reloading = self._reloading
        if reloading is None or reloading.done():
            self.shipper.ship(token)
            return

        async def after_reload() -> None:
            await asyncio.wait((reloading,))
            self.shipper.ship(token)

        self._spawn(after_reload())

    def _snapshot(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        if self._app is not None:
            self._app.follow(snapshot)

    def _stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    def _drain(self, reason: str) -> None:
        if self._app is not None:
            self._app.gateway.drain(reason)

    def _answered(self, answer: Welcome | Refused) -> None:
        waiting = self._welcome
        if waiting is None or waiting.done():
            # a reconnection's Welcome: the config comes by Reload
            return
        if isinstance(answer, Welcome):
            waiting.set_result(answer)
        else:
            waiting.set_exception(RefusedByControl(answer.reason))

    async def _reload(self, reload: Reload) -> None:
        if self._app is None or reload.config_version <= self._config_version:
            return
        try:
            config = self._config(reload.config_text, reload.config_dir, reload.promoted)
            await self._app.swap(lambda: self._runtime(config))
        except (ConfigError, OSError, RuntimeError) as exc:
            log.error("worker %d: the reloaded config did not start here: %s", self.index, exc)
            return
        self._config_version = reload.config_version

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _ship(self, batch: Batch) -> None:
        self.link.send_batch(batch)

    def _settle(self) -> None:
        """What the requests left for later: their batch, shipped now (the calls guard)."""
        self.shipper.ship()

    def _stale(self) -> bool:
        return self.link.stale

    def _gauges(self) -> Gauges | None:
        if self._app is None:
            return None
        app = self._app
        return app.gateway.gauges(_rss_bytes(), time.process_time(), app.memory.levels())


class RefusedByControl(Exception):
    """The control process refused this worker; its message says why."""


def _client_limits(config: GatewayConfig) -> ClientLimits:
    server = config.server
    return ClientLimits(
        max_header_bytes=server.max_header_bytes,
        header_timeout_s=server.header_timeout_s,
        body_timeout_s=server.body_timeout_s,
        # the edge refuses a body over the limit itself (and records it); the server bounds
        # what a body's framing may add to it
        max_body_bytes=2 * server.max_body_bytes + FRAMING_BYTES,
        max_connections=door_connections(config),
        max_connections_per_peer=server.max_connections_per_peer,
    )


def _grace(config: GatewayConfig) -> float:
    """What requests in flight may still need: the longest deadline a model allows."""
    longest_ms = max(m.max_timeout_ms for m in config.models.values())
    return longest_ms / 1000 + DRAIN_SLACK_S


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return 0


def _settle_garbage_collector() -> None:
    """As the control process does after start-up (`gateway.api.app`): start-up objects out of
    the collector's sight, young collections kept short."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(2_000, 10, 100)


if __name__ == "__main__":
    sys.exit(main())

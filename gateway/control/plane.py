"""The control process's side of its data-plane workers: link, snapshots, batches, supervisor.

    control process                                            workers (`gateway.worker`)
    GatewayApp (Gateway + FastAPI on RUN_DIR/admin.sock) ◄─ proxied: every non-data-plane URL
    FleetView ── SnapshotPublisher ── LinkServer(RUN_DIR/control.sock) ──► Welcome, Snapshots
    BatchIntake ◄────────────────────── LinkServer ◄──────────────────────── Batches
    Supervisor (StandbySpawner) ─────── spawns, replaces, stops ─────────► the REST socket
                                                                            inherited

`start` listens on the link, publishes the fleet view at the publisher's pace (sent when it
changed, and as a heartbeat), then starts the workers, each told the exact config text this process
validated. A worker that connects is welcomed with that text and the latest snapshot; its
batches are taken into the control's gateway (`BatchIntake`); when its connection ends its
levels stop counting. `reloaded` follows a reload (or a promotion's hand-over): the view and
the intake read the new gateway from then on, and every worker is told to rebuild from the new
config. `drain` publishes the draining gateway at once (every worker's readiness 503);
`stop` stops the workers (SIGTERM: they finish their requests in flight within ``grace_s``),
then the link.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from gateway.call_count import ENV as CALL_COUNT_ENV
from gateway.clock import Clock
from gateway.control.forks import ForkServer
from gateway.control.intake import BatchIntake
from gateway.control.runtime import Gateway
from gateway.control.spawn import process_spawner
from gateway.control.standby import StandbySpawner
from gateway.control.supervisor import Supervisor, WorkerEvent
from gateway.control.view import FleetView
from gateway.periodic import Periodic
from gateway.snapshot.link_server import LinkServer, WorkerConnection
from gateway.snapshot.messages import PROTOCOL, Batch, Flush, Hello, Reload, Welcome
from gateway.snapshot.publisher import SnapshotPublisher

log = logging.getLogger(__name__)

# the longest a control-plane request waits for the workers' flush
BARRIER_S = 0.5
# a command the workers run under (benchmarks)
WORKER_PREFIX_ENV = "GATEWAY_WORKER_PREFIX"


class ControlPlane:
    def __init__(
        self,
        gateway: Gateway,
        run_dir: Path,
        workers: int,
        rest: socket.socket,
        config_text: str,
        config_dir: str,
        *,
        grpc: tuple[str, int] | None = None,
        clock: Clock | None = None,
        forks: ForkServer | None = None,
    ) -> None:
        """``rest``: the REST listening socket the workers inherit (kept open here while they
        serve, so a worker being replaced refuses nobody); ``grpc``: the host and port of
        their gRPC door (None: none); ``forks``: where workers are forked from (None: each
        started anew)."""
        self.run_dir = run_dir
        self.workers = workers
        self._clock = clock or gateway.clock
        self._rest = rest
        self._grpc = grpc
        self._text = config_text
        self._dir = config_dir
        self._version = 1
        self._promoted: tuple[str, ...] = ()
        self.view = FleetView(gateway)
        self.intake = BatchIntake(gateway, self.view)
        self.intake.on_flushed = self._flush_answered
        self._token = 0
        # barriers waiting for flushes
        self._waiters: list[asyncio.Future[None]] = []
        self.link = LinkServer(str(run_dir / "control.sock"), self._hello, self._batch, self._lost)
        self.publisher = SnapshotPublisher(self.view.snapshot, self.link.broadcast, self._clock)
        self._publishing: Periodic | None = None
        ahead = gateway.config.server.standby_worker
        self._forks = forks
        spawner = process_spawner if forks is None else forks.spawner
        self._spawner = StandbySpawner(self._argv, (rest.fileno(),), ahead=ahead, spawner=spawner)
        self.supervisor = Supervisor(self._spawner, workers, clock=self._clock)
        self._attach(gateway)

    def _attach(self, gateway: Gateway) -> None:
        self._gateway = gateway
        gateway.data_plane = self.state
        gateway.metrics.on_scrape(self._scrape)

    @property
    def admin_socket(self) -> Path:
        """Where the control's own HTTP server listens (the workers proxy to it)."""
        return self.run_dir / "admin.sock"

    async def start(self) -> None:
        await self.link.start()
        self._publishing = self.publisher.service()
        self._publishing.start()
        self.publisher.tick()
        self.supervisor.on_event = self._worker_event
        await self.supervisor.start()
        if os.environ.get(CALL_COUNT_ENV):
            # the calls guard counts in the workers
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGUSR1, signal.SIGUSR2):
                loop.add_signal_handler(sig, self._forward, sig)
        log.info("%d data-plane worker(s) started", self.workers)

    def serving(self) -> bool:
        """Whether every worker serves (each has shipped a batch: it does once it serves)."""
        return len(self.intake.serving) >= self.workers

    async def barrier(self, timeout_s: float = BARRIER_S) -> bool:
        """Returns once every connected worker has shipped what it answered so far and
        applied every snapshot sent before (True), or after ``timeout_s`` (False): what the
        control reads next counts every worker's requests, and an operator's decision just
        taken reaches every worker before its answer does."""
        # a change not yet sent goes before the flush
        self.publisher.tick()
        self._token += 1
        token = self._token
        waiting = {c.worker for c in self.link.connections if c.worker is not None}
        if not waiting:
            return True
        self.link.broadcast(Flush(token))
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                while any(self.intake.flushed.get(w, 0) < token for w in waiting):
                    answered = loop.create_future()
                    self._waiters.append(answered)
                    await answered
                    waiting &= {c.worker for c in self.link.connections if c.worker is not None}
        except TimeoutError:
            return False
        return True

    def _flush_answered(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def drain(self) -> None:
        """The gateway drains: every worker hears it now, not at the next tick."""
        self.publisher.tick()

    async def stop(self, grace_s: float) -> None:
        """No new connections; the workers finish what they hold within ``grace_s`` (then
        are killed); the link closes."""
        # the workers' copies close as they stop: then nobody listens
        self._rest.close()
        # the standby holds a copy too: it goes at once, as the workers are told to stop
        await asyncio.gather(self._spawner.close(), self.supervisor.stop(grace_s))
        if self._publishing is not None:
            await self._publishing.stop()
        await self.link.close()

    def reloaded(self, gateway: Gateway, config_text: str, promoted: tuple[str, ...]) -> None:
        """A reload's (or a promotion's) gateway now decides; the workers rebuild from its
        config: ``config_text`` as read, with ``promoted`` models handed to their candidates
        (`gateway.rollout.handover.promoted_config`)."""
        self._attach(gateway)
        self.view.bind(gateway)
        self.intake.bind(gateway)
        self._text, self._promoted = config_text, promoted
        self._version += 1
        reload = Reload(config_text, self._version, self._dir, promoted)
        self.link.broadcast(reload)
        self.publisher.tick()

    def state(self) -> dict[str, Any]:
        """What `/admin/state` shows of the workers and their link."""
        forks = self._forks
        return {
            "count": self.workers,
            "workers": self.supervisor.view(),
            "connected": sorted(c.worker for c in self.link.connections if c.worker is not None),
            "snapshot_version": self.publisher.version,
            "batches_dropped": self.intake.gaps,
            "records_refused": dict(self.intake.refused),
            "stale_answers": self.intake.stale_answers,
            "fork_server": None if forks is None else {"pid": forks.pid, "forking": forks.alive},
        }

    def _scrape(self) -> None:
        """Each worker's own series, as of its last batch."""
        metrics = self._gateway.metrics
        gauges = self.intake.levels.gauges
        for row in self.supervisor.view():
            index = row["index"]
            levels = gauges.get(index)
            metrics.set_worker(
                index,
                rss_bytes=levels.rss_bytes if levels is not None else 0,
                cpu_s=levels.cpu_s if levels is not None else 0.0,
                stale=self.intake.stale.get(index, False),
                restarts=row["restarts"],
            )

    # --- the link -----------------------------------------------------------------------

    def _hello(self, connection: WorkerConnection, hello: Hello) -> None:
        connection.send(
            Welcome(
                PROTOCOL,
                hello.worker,
                self._text,
                self._version,
                str(self.run_dir),
                self._dir,
                self.workers,
                self._promoted,
            )
        )
        latest = self.publisher.latest
        connection.send(latest if latest is not None else self.view.snapshot())

    def _batch(self, connection: WorkerConnection, batch: Batch) -> None:
        self.intake.take(batch)

    def _lost(self, connection: WorkerConnection) -> None:
        if connection.worker is not None:
            self.intake.forget(connection.worker)
            # a barrier waiting on it waits no more
            self._flush_answered()

    # --- the workers --------------------------------------------------------------------

    def _argv(self, index_fd: int) -> list[str]:
        # a command the workers run under, for benchmarks and profilers (callgrind, py-spy)
        prefix = shlex.split(os.environ.get(WORKER_PREFIX_ENV, ""))
        argv = [
            *prefix,
            sys.executable,
            "-m",
            "gateway.worker",
            "--run-dir",
            str(self.run_dir),
            "--index-fd",
            str(index_fd),
            "--rest-fd",
            str(self._rest.fileno()),
        ]
        if self._grpc is not None:
            argv += ["--grpc-host", self._grpc[0], "--grpc-port", str(self._grpc[1])]
        return argv

    def _forward(self, sig: signal.Signals) -> None:
        """The calls guard's window signals, to the workers that serve the requests."""
        for pid in self.supervisor.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _worker_event(self, event: WorkerEvent) -> None:
        history = self._gateway.history
        history.record_event("worker", f"worker {event.index}", event.detail, event.level)


async def wait_serving(plane: ControlPlane, timeout_s: float) -> bool:
    """Whether ``plane``'s workers all connected within ``timeout_s``."""
    loop = asyncio.get_running_loop()
    until = loop.time() + timeout_s
    while loop.time() < until:
        connected = {c.worker for c in plane.link.connections if c.worker is not None}
        if len(connected) >= plane.workers:
            return True
        await asyncio.sleep(0.05)
    return False

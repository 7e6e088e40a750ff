"""uvicorn's server with the gateway's own signals: drain on SIGTERM/SIGINT, reload on SIGHUP.

uvicorn alone stops listening at once on SIGTERM (readiness goes from 200 to "connection
refused" before a load balancer has taken the instance out) and then re-raises the
signal, so the process exits 143 and whatever ran after ``serve()`` (``gateway up`` stopping
its replicas) never runs. Here the first SIGTERM or SIGINT starts a drain instead:

1. readiness answers 503 "draining" at once, while every request is still served;
2. after ``server.drain_s`` (time for endpoints to propagate), uvicorn's own shutdown: new
   connections refused, idle keep-alive connections closed, in-flight requests finished
   (bounded by the longest deadline a model allows), the gateway's services stopped;
3. ``serve()`` returns and the process exits 0.

With a gRPC door (``server.grpc_port``; `gateway.grpc_door.server`) the same drain applies to
it: it keeps serving through ``drain_s`` (ServerReady says not ready), then takes no new RPCs
when HTTP stops taking connections, and its RPCs in flight finish within the same grace, before
the gateway stops.

A second SIGINT (Ctrl-C twice) skips the waits. SIGHUP reloads the config, as
``POST /admin/reload`` does; with ``server.watch_config`` the file's modification time is
polled too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Protocol

import uvicorn

from gateway.api.app import GatewayApp
from gateway.errors import GatewayError
from gateway.grpc_door.server import GrpcDoor

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 2.0
DRAIN_SIGNALS = (signal.SIGTERM, signal.SIGINT)
STARTUP_FAILURE = 3  # uvicorn's exit code when it cannot start


class DataPlane(Protocol):
    """The processes that serve the data plane beside this server (a control process's
    workers, `gateway.control.plane.ControlPlane`)."""

    async def start(self) -> None: ...

    def drain(self) -> None: ...

    async def stop(self, grace_s: float) -> None: ...


class GatewayServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        app: GatewayApp,
        config_path: str | None = None,
        grpc_port: int | None = None,
        *,
        plane: DataPlane | None = None,
    ) -> None:
        """``grpc_port``: where the gRPC door listens (on the HTTP host); None: no gRPC.
        ``plane``: the data plane's workers, started once the gateway has, drained with it
        and stopped (their requests in flight finished) before it stops."""
        super().__init__(config)
        self.app = app
        self.plane = plane
        self._config_path = config_path
        self._tasks: set[asyncio.Task[None]] = set()
        self.draining = False
        self.grpc = None if grpc_port is None else GrpcDoor(app, app.bind_host, grpc_port)
        self._grpc_stopped: asyncio.Future[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start, with the gRPC port bound before the gateway starts and served
        once it has."""
        if self.grpc is not None:
            try:
                self.grpc.bind()
            except OSError as exc:
                log.error("%s", exc)
                sys.exit(STARTUP_FAILURE)
        if self.plane is not None:  # its workers start while the gateway starts
            await self.plane.start()
        await super().startup(sockets)
        if self.plane is not None and (self.should_exit or not self.started):
            await self.plane.stop(0.0)  # the gateway did not start: no shutdown follows
        if self.grpc is not None and self.started and not self.should_exit:
            await self.grpc.start()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Both doors stop taking requests at once; both finish theirs in the same grace.
        A data plane's workers stop first (theirs finished within the grace), then this
        server."""
        timeout = self.config.timeout_graceful_shutdown
        if self.plane is not None:
            await self.plane.stop(0.0 if self.force_exit or timeout is None else float(timeout))
        if self.grpc is not None:
            timeout = self.config.timeout_graceful_shutdown  # always set (see begin_drain)
            grace = None if self.force_exit or timeout is None else float(timeout)
            self._grpc_stopped = asyncio.ensure_future(self.grpc.stop(grace))
        await super().shutdown(sockets)

    async def _wait_tasks_to_complete(self) -> None:
        """uvicorn's wait for HTTP requests in flight (bounded by the graceful timeout), and
        the gRPC door's, before the gateway stops."""
        await super()._wait_tasks_to_complete()
        if self._grpc_stopped is not None:
            await asyncio.shield(self._grpc_stopped)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        """Replaces uvicorn's handlers (which re-raise the signal after shutdown)."""
        if threading.current_thread() is not threading.main_thread():
            yield  # signals reach only the main thread (a server run in a test's thread)
            return
        loop = asyncio.get_running_loop()
        handled = (*DRAIN_SIGNALS, signal.SIGHUP)
        for sig in DRAIN_SIGNALS:
            loop.add_signal_handler(sig, self.begin_drain, sig)
        loop.add_signal_handler(signal.SIGHUP, self._spawn, self._reload, "SIGHUP", "SIGHUP")
        server = self.app.gateway.config.server
        if server.watch_config and self._config_path is not None:
            self._spawn(self._watch, self._config_path)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            for task in self._tasks:
                task.cancel()

    def begin_drain(self, sig: int = signal.SIGTERM) -> None:
        if self.draining:
            if sig == signal.SIGINT:  # a second Ctrl-C: stop now
                log.warning("second SIGINT: stopping without waiting")
                self.should_exit = self.force_exit = True
            return
        self.draining = True
        drain_s = self.app.gateway.config.server.drain_s
        self.config.timeout_graceful_shutdown = max(1, round(self.app.drain()))
        if self.plane is not None:
            self.plane.drain()
        log.warning(
            "%s: draining (readiness 503, still serving) for %.1f s, then closing",
            signal.Signals(sig).name,
            drain_s,
        )
        self._spawn(self._close_after, drain_s)

    async def _close_after(self, drain_s: float) -> None:
        await asyncio.sleep(drain_s)
        log.info("drain period over: refusing new connections, finishing in-flight requests")
        self.should_exit = True  # uvicorn's main loop sees it within 0.1 s

    async def _reload(self, why: str, who: str) -> None:
        """``who`` asked for it, as the audit trail names it (a signal, the file watch)."""
        try:
            result = await self.app.reload(who, why)
        except GatewayError as exc:
            log.error("%s: %s", why, exc.message)
            return
        log.info("%s: reloaded %s (models: %s)", why, result["reloaded"], result["models"])

    async def _watch(self, path: str) -> None:
        """Reloads when the file's modification time (or size) changes."""
        last = _stamp(path)
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            current = _stamp(path)
            if current != last and current is not None:
                last = current
                await self._reload(f"{path} changed", "server.watch_config")

    def _spawn(self, coro_fn: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro_fn(*args))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size

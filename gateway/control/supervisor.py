"""Keeps ``count`` worker processes running, and stops them all.

Each worker has an index, 0 to count - 1, kept for its whole life and reused by its
replacement. A task per worker waits for its exit (the loop's child watching: uvloop's and
asyncio's both). A worker that exits while the supervisor runs, whatever its status, is
replaced after `RestartBackoff.delay` (at once for the first exit in a row, so a killed
worker serves again within moments; longer for a worker that keeps dying). `stop` sends
SIGTERM to each worker by PID, waits up to a grace period, then sends SIGKILL to what is left,
and reaps every one.

What happens is told to ``on_event`` (`WorkerEvent`: started, exited, replaced; the control
process wires it to the timeline and the metrics), and `view` is each worker's row of
``/admin/state``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gateway.clock import Clock, MonotonicClock, Timer
from gateway.control.spawn import Child, Spawn

log = logging.getLogger(__name__)

# after SIGKILL: how long to wait for the exits before giving up on them
KILL_WAIT_S = 5.0
EventKind = Literal["started", "exited", "replaced"]


@dataclass(frozen=True)
class RestartBackoff:
    """How long a worker that exited waits to be started again, by its exits in a row.

    The first exit in a row is replaced at once (``first_s``); the next ones wait ``base_s``
    doubling to ``max_s``, so the first few all restart within 2 s and a crash loop costs
    little. An exit after ``stable_s`` up starts the count again.
    """

    first_s: float = 0.0
    base_s: float = 0.25
    max_s: float = 30.0
    stable_s: float = 10.0
    # past this wait, a worker is crash-looping (said at ERROR, not WARNING)
    looping_s: float = 2.0

    def delay(self, exits_in_a_row: int) -> float:
        if exits_in_a_row <= 1:
            return self.first_s
        return min(self.max_s, self.base_s * 2.0 ** (exits_in_a_row - 2))


@dataclass(frozen=True)
class WorkerEvent:
    """One thing that happened to a worker: ``kind`` with its pid, said in ``detail`` at a
    timeline ``level`` (ok, info, warn, bad)."""

    kind: EventKind
    index: int
    pid: int
    detail: str
    level: str


def _no_event(event: WorkerEvent) -> None:
    """Where events go when no one listens."""


def describe_exit(returncode: int) -> str:
    """A process's exit status in words: its code, or the signal that ended it."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


@dataclass
class _Worker:
    """One index's worker of the moment, and its history."""

    index: int
    process: Child | None = None
    watcher: asyncio.Task[None] | None = None
    # the clock's time
    started_at: float = 0.0
    started_wall: float = 0.0
    restarts: int = 0
    exits_in_a_row: int = 0
    last_exit: int | None = None
    restart_at: float | None = None
    timer: Timer | None = None


class Supervisor:
    """Starts, watches, replaces and stops ``count`` workers, each started by ``spawn``."""

    def __init__(
        self,
        spawn: Spawn,
        count: int,
        *,
        clock: Clock | None = None,
        backoff: RestartBackoff | None = None,
        on_event: Callable[[WorkerEvent], None] = _no_event,
    ) -> None:
        if count < 1:
            raise ValueError(f"at least one worker, not {count}")
        self._spawn = spawn
        self._clock = clock or MonotonicClock()
        self._backoff = backoff or RestartBackoff()
        self.on_event = on_event
        self._workers = [_Worker(index) for index in range(count)]
        self._spawning: set[asyncio.Task[None]] = set()
        self._stopping = False

    @property
    def pids(self) -> list[int]:
        """The running workers' PIDs, by index."""
        return [w.process.pid for w in self._workers if w.process is not None]

    async def start(self) -> None:
        """Starts every worker; if one cannot be started, stops those that were and raises."""
        try:
            for worker in self._workers:
                self._started(worker, await self._spawn(worker.index), "started")
        except BaseException:
            await self.stop(0.0)
            raise

    def view(self) -> list[dict[str, Any]]:
        """Each worker as ``/admin/state`` shows it."""
        now = self._clock.now()
        return [
            {
                "index": w.index,
                "pid": None if w.process is None else w.process.pid,
                "state": _state(w, self._stopping),
                "started": round(w.started_wall, 3),
                "restarts": w.restarts,
                "exits_in_a_row": w.exits_in_a_row,
                "last_exit": None if w.last_exit is None else describe_exit(w.last_exit),
                "restart_in_s": _seconds_until(w.restart_at, now),
            }
            for w in self._workers
        ]

    async def stop(self, grace_s: float, *, term: bool = True) -> None:
        """Stops every worker: SIGTERM (unless ``term`` is False: they were told another way),
        up to ``grace_s`` for them to exit, then SIGKILL; each one reaped. No replacement
        starts once this is called."""
        self._stopping = True
        for worker in self._workers:
            if worker.timer is not None:
                worker.timer.cancel()
            worker.timer = worker.restart_at = None
        # a replacement being spawned now is running once this returns: stopped below
        await asyncio.gather(*self._spawning, return_exceptions=True)
        if term:
            self._signal_all(signal.SIGTERM)
        if not await self._exits(self._clock.now() + grace_s):
            for worker in self._workers:
                if worker.process is not None:
                    log.warning(
                        "worker %d (pid %d) still running %.1f s after it was told to stop; "
                        "killing it",
                        worker.index,
                        worker.process.pid,
                        grace_s,
                    )
            self._signal_all(signal.SIGKILL)
            if not await self._exits(self._clock.now() + KILL_WAIT_S):
                log.error("workers %s did not exit after SIGKILL", self.pids)

    def _signal_all(self, sig: signal.Signals) -> None:
        for worker in self._workers:
            if worker.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(sig)

    async def _exits(self, until: float) -> bool:
        """Whether every worker has exited (and been reaped) by ``until``."""
        watchers = [w.watcher for w in self._workers if w.watcher is not None]
        if watchers:
            with contextlib.suppress(TimeoutError):
                async with self._clock.timeout_at(until):
                    await asyncio.wait(watchers)
        return all(w.process is None for w in self._workers)

    def _started(self, worker: _Worker, process: Child, kind: EventKind) -> None:
        worker.process = process
        worker.started_at, worker.started_wall = self._clock.now(), self._clock.wall()
        worker.watcher = asyncio.create_task(
            self._watch(worker, process), name=f"worker-{worker.index}-watch"
        )
        if kind == "replaced":
            worker.restarts += 1
            detail = f"replaced (pid {process.pid}; restart {worker.restarts})"
            log.warning("worker %d %s", worker.index, detail)
            self._emit(kind, worker, process.pid, detail, "warn")
        else:
            log.info("worker %d started (pid %d)", worker.index, process.pid)
            self._emit(kind, worker, process.pid, f"started (pid {process.pid})", "ok")

    async def _watch(self, worker: _Worker, process: Child) -> None:
        returncode = await process.wait()
        worker.process, worker.watcher = None, None
        worker.last_exit = returncode
        if self._stopping:
            self._emit(
                "exited", worker, process.pid, f"stopped: {describe_exit(returncode)}", "info"
            )
            return
        up_s = self._clock.now() - worker.started_at
        what = f"(pid {process.pid}) {describe_exit(returncode)} after {up_s:.1f} s up"
        self._failed(worker, what, process.pid, stable=up_s >= self._backoff.stable_s)

    def _failed(self, worker: _Worker, what: str, pid: int, *, stable: bool) -> None:
        """A worker exited (or could not be started): its replacement, after the backoff."""
        worker.exits_in_a_row = 1 if stable else worker.exits_in_a_row + 1
        delay = self._backoff.delay(worker.exits_in_a_row)
        looping = delay > self._backoff.looping_s
        detail = (
            f"{what}; {worker.exits_in_a_row} in a row, "
            f"{'crash-looping: ' if looping else ''}replaced in {delay:.1f} s"
        )
        log.log(logging.ERROR if looping else logging.WARNING, "worker %d %s", worker.index, detail)
        self._emit("exited", worker, pid, detail, "bad")
        worker.restart_at = self._clock.now() + delay
        worker.timer = self._clock.call_at(worker.restart_at, lambda: self._replace_soon(worker))

    def _replace_soon(self, worker: _Worker) -> None:
        worker.timer = None
        task = asyncio.create_task(self._replace(worker), name=f"worker-{worker.index}-spawn")
        self._spawning.add(task)
        task.add_done_callback(self._spawning.discard)

    async def _replace(self, worker: _Worker) -> None:
        if self._stopping:
            return
        worker.restart_at = None
        try:
            process = await self._spawn(worker.index)
        except Exception as exc:
            log.error("worker %d could not be started", worker.index, exc_info=True)
            if not self._stopping:
                self._failed(worker, f"could not be started ({exc})", 0, stable=False)
            return
        self._started(worker, process, "replaced")

    def _emit(self, kind: EventKind, worker: _Worker, pid: int, detail: str, level: str) -> None:
        try:
            self.on_event(WorkerEvent(kind, worker.index, pid, detail, level))
        except Exception:
            log.exception("a worker event's listener failed")


def _state(worker: _Worker, stopping: bool) -> str:
    if worker.process is not None:
        return "stopping" if stopping else "running"
    return "stopped" if stopping else "restarting"


def _seconds_until(when: float | None, now: float) -> float | None:
    return None if when is None else round(max(0.0, when - now), 3)

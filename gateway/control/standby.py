"""A worker started ahead of need: its imports done, waiting to be told which worker it is.

Most of a worker's start is imports, and on a loaded machine that takes longer than the 2 s in
which a dead worker must be serving again. `StandbySpawner` is a `Spawn` that keeps one worker
process started ahead; ``spawn(index)`` hands that one its index (it serves at once) and starts
the next standby. It costs one idle process beside the workers (`server.standby_worker`: off,
each spawn starts its worker cold and none waits).

The protocol, for the worker's main: the file descriptor given to ``argv(fd)`` is the read end
of a pipe; read it to EOF. An index (ASCII decimal digits, a newline) then EOF: serve as that
worker. EOF with nothing: exit 0 (no longer needed: the control process stopped, or died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gateway.control.spawn import Child, Spawner, process_spawner

log = logging.getLogger(__name__)

# what a standby's spawn is asked for: no index yet
STANDBY_INDEX = -1
KILL_WAIT_S = 5.0


@dataclass
class _Standby:
    process: Child
    # the write end; closed once the index is written, or to dismiss it
    index_pipe: int

    def assign(self, index: int) -> None:
        """Tells the standby its index; from now on it is that worker."""
        try:
            # a few bytes: a pipe never blocks on it
            os.write(self.index_pipe, b"%d\n" % index)
        finally:
            os.close(self.index_pipe)


class StandbySpawner:
    """A `Spawn` whose workers were started ahead and wait for their index on a pipe.

    ``argv(fd)``: a worker's command line, ``fd`` the pipe it reads its index from; the
    listening sockets ``pass_fds``, ``env`` and ``die_with_parent`` are `process_spawner`'s.
    `close` stops the standby once the workers are stopped.
    """

    def __init__(
        self,
        argv: Callable[[int], Sequence[str]],
        pass_fds: Sequence[int],
        *,
        env: Mapping[str, str] | None = None,
        die_with_parent: bool = True,
        ahead: bool = True,
        spawner: Spawner = process_spawner,
    ) -> None:
        """``ahead``: keep a standby started (False: each spawn starts its worker cold, and
        no process waits beside the workers); ``spawner``: how a worker process starts
        (`gateway.control.forks.ForkServer.spawner`: forked from one that did its imports)."""
        self._ahead = ahead
        self._spawner = spawner
        self._argv = argv
        self._pass_fds = tuple(pass_fds)
        self._env = env
        self._die_with_parent = die_with_parent
        self._standby: _Standby | None = None
        self._closed = False

    @property
    def standby_pid(self) -> int | None:
        """The PID of the worker started ahead (None: none at the moment)."""
        return None if self._standby is None else self._standby.process.pid

    async def __call__(self, index: int) -> Child:
        if self._closed:
            raise RuntimeError("the standby spawner is closed")
        ready, self._standby = self._standby, None
        if ready is None or ready.process.returncode is not None:
            if ready is not None:
                # it died waiting: started anew, cold
                os.close(ready.index_pipe)
                log.warning("the standby worker (pid %d) had exited", ready.process.pid)
            ready = await self._start()
        ready.assign(index)
        if self._ahead:
            # the next one warms up while this one serves
            self._standby = await self._start()
        return ready.process

    async def close(self, grace_s: float = 2.0) -> None:
        """Dismisses the standby: EOF on its pipe and SIGTERM, SIGKILL after ``grace_s``."""
        self._closed = True
        standby, self._standby = self._standby, None
        if standby is None:
            return
        os.close(standby.index_pipe)
        with contextlib.suppress(ProcessLookupError):
            standby.process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(standby.process.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                standby.process.send_signal(signal.SIGKILL)
            await asyncio.wait_for(standby.process.wait(), KILL_WAIT_S)

    async def _start(self) -> _Standby:
        # close-on-exec: no other child holds the write end
        read_end, write_end = os.pipe()
        try:
            spawn = self._spawner(
                lambda _: self._argv(read_end),
                (*self._pass_fds, read_end),
                env=self._env,
                die_with_parent=self._die_with_parent,
            )
            process = await spawn(STANDBY_INDEX)
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        return _Standby(process, write_end)

"""Starting one worker process: its command line, with the listening sockets it inherits.

A worker runs in its own session, so Ctrl-C at a terminal reaches the control process alone,
which then stops the workers in order (`Supervisor.stop`). On Linux a worker also gets SIGTERM
if the control process dies without stopping it (``PR_SET_PDEATHSIG``): it finishes what it
holds and exits, instead of keeping the port from the next control process.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import signal
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

PR_SET_PDEATHSIG = 1
# a worker's index -> its command line
WorkerArgv = Callable[[int], Sequence[str]]


class Child(Protocol):
    """A started worker process, as the supervisor needs it (`asyncio.subprocess.Process`)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, signal: int) -> None: ...


# starts the worker of an index
Spawn = Callable[[int], Awaitable[Child]]


class Spawner(Protocol):
    """What makes a `Spawn` of a command line and the descriptors it inherits
    (`process_spawner`, `gateway.control.forks.ForkServer.spawner`)."""

    def __call__(
        self,
        argv: WorkerArgv,
        pass_fds: Sequence[int],
        *,
        env: Mapping[str, str] | None = ...,
        die_with_parent: bool = ...,
    ) -> Spawn: ...


def process_spawner(
    argv: WorkerArgv,
    pass_fds: Sequence[int],
    *,
    env: Mapping[str, str] | None = None,
    die_with_parent: bool = True,
) -> Spawn:
    """A `Spawn` that starts ``argv(index)`` as a child process of the running loop (watched
    by it: uvloop's and asyncio's both), handing it ``pass_fds`` (the listening sockets) and
    ``env`` (None: this process's environment)."""
    fds = tuple(pass_fds)
    preexec = _parent_death_signal(signal.SIGTERM) if die_with_parent else None

    async def spawn(index: int) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *argv(index),
            stdin=subprocess.DEVNULL,
            pass_fds=fds,
            start_new_session=True,
            preexec_fn=preexec,
            env=env,
        )

    return spawn


def _parent_death_signal(sig: signal.Signals) -> Callable[[], None] | None:
    """What the child runs between fork and exec to get ``sig`` when its parent dies; None
    where libc has no ``prctl`` (not Linux). libc is looked up here, in the parent: the
    child only makes the call (no library loading after a fork, whatever other threads held)."""
    call = prctl()
    if call is None:
        return None

    def set_signal() -> None:
        call(PR_SET_PDEATHSIG, int(sig))

    return set_signal


@functools.cache
def prctl() -> Callable[[int, int], int] | None:
    """libc's ``prctl`` (None where there is none: not Linux)."""
    try:
        function: Callable[[int, int], int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function

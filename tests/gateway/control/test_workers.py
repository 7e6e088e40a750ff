"""Workers as real processes on one inherited listening socket, supervised on a real loop.

The toy worker (`toy_worker.py`) answers each request with its PID, so a client sees which
worker served it. Every wait is bounded on a condition; every PID the supervisor ever started
is checked gone (exited and reaped) at the end of each test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.control.sockets import rest_listener
from gateway.control.spawn import Child, process_spawner
from gateway.control.supervisor import RestartBackoff, Supervisor, WorkerEvent
from tests.support.processes import wait_until_async

TOY_WORKER = Path(__file__).with_name("toy_worker.py")
REPLACED_WITHIN_S = 2.0  # the bound: a killed worker's replacement serves by then


@dataclass
class Stack:
    """A supervisor of toy workers on ``port``; ``started``: every PID it ever started."""

    supervisor: Supervisor
    listener: socket.socket  # the control process's copy, held while the workers run
    markers: Path
    started: list[int] = field(default_factory=list)
    events: list[WorkerEvent] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def ready(self) -> set[int]:
        return {int(p.name.split("-")[1]) for p in self.markers.glob("ready-*")}

    def termed(self) -> set[int]:
        return {int(p.name.split("-")[1]) for p in self.markers.glob("term-*")}

    async def serving(self, timeout: float = 10.0) -> None:
        """Until every running worker has its SIGTERM handler in place and accepts."""
        await wait_until_async(
            lambda: set(self.supervisor.pids) <= self.ready(), timeout, message="workers ready"
        )


def fetch(port: int, timeout: float = 5.0) -> int:
    """One request on a connection of its own: the PID of the worker that answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := conn.recv(4096):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), reply
    return int(body)


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs: exited and reaped (a zombie still answers kill 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
async def stacks(tmp_path: Path) -> AsyncIterator[list[Stack]]:
    """Stacks the test starts (`start`); each one stopped, and its PIDs checked gone."""
    made: list[Stack] = []
    yield made
    for stack in made:
        await stack.supervisor.stop(2.0)
        stack.listener.close()
        assert [p for p in stack.started if not gone(p)] == []


async def start(
    stacks: list[Stack],
    tmp_path: Path,
    count: int,
    flags: Sequence[Sequence[str]] = (),
    backoff: RestartBackoff | None = None,
) -> Stack:
    """``count`` toy workers on a new listening socket; ``flags[i]``: worker i's own flags."""
    listener = rest_listener("127.0.0.1", 0)
    markers = tmp_path / f"markers-{len(stacks)}"
    markers.mkdir()
    fd = listener.fileno()

    def argv(index: int) -> list[str]:
        own = list(flags[index]) if index < len(flags) else []
        return [sys.executable, str(TOY_WORKER), str(fd), str(markers), *own]

    spawn = process_spawner(argv, [fd])
    started: list[int] = []

    async def recorded(index: int) -> Child:
        child = await spawn(index)
        started.append(child.pid)
        return child

    events: list[WorkerEvent] = []
    supervisor = Supervisor(recorded, count, backoff=backoff, on_event=events.append)
    stack = Stack(supervisor, listener, markers, started, events)
    stacks.append(stack)
    await supervisor.start()
    return stack


async def test_workers_share_one_port(stacks: list[Stack], tmp_path: Path) -> None:
    stack = await start(stacks, tmp_path, 3)
    await stack.serving()
    answered: set[int] = set()

    async def burst() -> None:
        pids = await asyncio.gather(*(asyncio.to_thread(fetch, stack.port) for _ in range(12)))
        answered.update(pids)

    async def more_than_one() -> None:
        while len(answered) < 2:
            await burst()

    await asyncio.wait_for(more_than_one(), 20.0)
    assert answered <= set(stack.supervisor.pids)


async def test_a_killed_worker_is_replaced_and_serves_within_2_s(
    stacks: list[Stack], tmp_path: Path
) -> None:
    # one worker: a request sent once it is dead waits in the backlog for the replacement
    stack = await start(stacks, tmp_path, 1)
    await stack.serving()
    first = await asyncio.to_thread(fetch, stack.port)
    killed_at = time.monotonic()
    os.kill(first, signal.SIGKILL)
    second = await asyncio.to_thread(fetch, stack.port, REPLACED_WITHIN_S)
    assert time.monotonic() - killed_at < REPLACED_WITHIN_S
    assert second != first
    assert stack.supervisor.pids == [second]
    await wait_until_async(lambda: gone(first), 5.0, message=f"pid {first} reaped")
    row = stack.supervisor.view()[0]
    assert (row["index"], row["restarts"], row["last_exit"]) == (0, 1, "killed by SIGKILL")
    kinds = [(e.kind, e.pid) for e in stack.events]
    assert kinds == [("started", first), ("exited", first), ("replaced", second)]


async def test_the_other_workers_serve_while_one_is_replaced(
    stacks: list[Stack], tmp_path: Path
) -> None:
    stack = await start(stacks, tmp_path, 2)
    await stack.serving()
    victim, survivor = stack.supervisor.pids
    os.kill(victim, signal.SIGKILL)
    pids = await asyncio.gather(*(asyncio.to_thread(fetch, stack.port) for _ in range(8)))
    assert victim not in pids
    await wait_until_async(
        lambda: len(stack.supervisor.pids) == 2, REPLACED_WITHIN_S, message="a replacement"
    )
    assert stack.supervisor.pids[1] == survivor  # the index is kept by its own worker


async def test_a_crash_loop_backs_off(stacks: list[Stack], tmp_path: Path) -> None:
    backoff = RestartBackoff(base_s=0.05, max_s=0.4)
    stack = await start(stacks, tmp_path, 2, [["--exit", "3"]], backoff)
    await wait_until_async(
        lambda: stack.supervisor.view()[0]["restarts"] >= 6, 20.0, message="six restarts"
    )
    looping, steady = stack.supervisor.view()
    assert looping["exits_in_a_row"] >= 6
    assert looping["last_exit"] == "exited with code 3"
    exits = [e for e in stack.events if e.kind == "exited" and e.index == 0]
    assert "crash-looping" not in exits[0].detail
    assert "replaced in 0.4 s" in exits[5].detail  # 0, 0.05, 0.1, 0.2, then the cap
    assert (steady["restarts"], steady["state"]) == (0, "running")


async def test_stop_sends_sigterm_then_kills_what_ignores_it(
    stacks: list[Stack], tmp_path: Path
) -> None:
    stack = await start(stacks, tmp_path, 2, [[], ["--ignore-term"]])
    await stack.serving()
    polite, stubborn = stack.supervisor.pids
    began = time.monotonic()
    await stack.supervisor.stop(0.5)
    assert time.monotonic() - began >= 0.5
    assert stack.termed() == {polite, stubborn}  # SIGTERM first, to both
    rows = stack.supervisor.view()
    assert [r["last_exit"] for r in rows] == ["exited with code 0", "killed by SIGKILL"]
    assert [r["state"] for r in rows] == ["stopped", "stopped"]
    assert gone(polite) and gone(stubborn)

"""A worker started ahead (`StandbySpawner`): a killed worker's replacement serves within 2 s
even when starting one takes longer; a standby that died is replaced by a cold start; closing
dismisses it. Real processes (`toy_worker.py` with ``--index-fd``), bounded waits, PIDs checked."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.control.sockets import rest_listener
from gateway.control.spawn import Child
from gateway.control.standby import StandbySpawner
from gateway.control.supervisor import Supervisor
from tests.gateway.control.test_workers import REPLACED_WITHIN_S, TOY_WORKER, fetch, gone
from tests.support.processes import wait_until_async

SLOW_START_S = 2.5  # longer than REPLACED_WITHIN_S: only a standby can make it


class Stack:
    """One supervisor of toy workers behind a standby spawner, on a port of its own."""

    def __init__(self, markers: Path, start_s: float, ahead: bool = True) -> None:
        self.listener = rest_listener("127.0.0.1", 0)
        self.port = int(self.listener.getsockname()[1])
        self.markers = markers
        self.started: list[int] = []
        fd = self.listener.fileno()
        self.spawner = StandbySpawner(
            lambda index_fd: [
                *(sys.executable, str(TOY_WORKER), str(fd), str(markers)),
                *("--start-s", str(start_s), "--index-fd", str(index_fd)),
            ],
            [fd],
            ahead=ahead,
        )
        self.supervisor = Supervisor(self._recorded, 1)

    async def _recorded(self, index: int) -> Child:
        child = await self.spawner(index)
        self.started.append(child.pid)
        if self.spawner.standby_pid is not None:
            self.started.append(self.spawner.standby_pid)
        return child

    def has(self, kind: str, pid: int | None) -> bool:
        return pid is not None and (self.markers / f"{kind}-{pid}").exists()

    async def close(self) -> None:
        await self.supervisor.stop(2.0)
        await self.spawner.close()
        self.listener.close()


@pytest.fixture
async def stacks(tmp_path: Path) -> AsyncIterator[list[Stack]]:
    made: list[Stack] = []
    yield made
    for stack in made:
        await stack.close()
        assert [p for p in stack.started if not gone(p)] == []


def stack(stacks: list[Stack], tmp_path: Path, start_s: float, ahead: bool = True) -> Stack:
    markers = tmp_path / f"markers-{len(stacks)}"
    markers.mkdir()
    stacks.append(Stack(markers, start_s, ahead))
    return stacks[-1]


async def test_a_standby_serves_within_2_s_where_a_cold_start_could_not(
    stacks: list[Stack], tmp_path: Path
) -> None:
    one = stack(stacks, tmp_path, SLOW_START_S)
    await one.supervisor.start()
    first, standby = one.supervisor.pids[0], one.spawner.standby_pid
    await wait_until_async(
        lambda: one.has("ready", first) and one.has("warm", standby), 20.0, message="warm"
    )
    killed_at = time.monotonic()
    os.kill(first, signal.SIGKILL)
    served_by = await asyncio.to_thread(fetch, one.port, REPLACED_WITHIN_S)
    assert time.monotonic() - killed_at < REPLACED_WITHIN_S
    assert served_by == standby
    # the reply can come before the spawn returns: it starts the next standby once told
    await wait_until_async(lambda: one.supervisor.pids == [standby], 5.0, message="taken over")
    assert (one.markers / f"ready-{standby}").read_text() == "0"  # told its index
    assert one.spawner.standby_pid not in (None, first, standby)  # the next one warms up


async def test_a_standby_that_died_is_replaced_by_a_cold_start(
    stacks: list[Stack], tmp_path: Path
) -> None:
    one = stack(stacks, tmp_path, 0.0)
    await one.supervisor.start()
    first, standby = one.supervisor.pids[0], one.spawner.standby_pid
    assert standby is not None
    os.kill(standby, signal.SIGKILL)
    await wait_until_async(lambda: gone(standby), 5.0, message="the standby reaped")
    os.kill(first, signal.SIGKILL)
    await wait_until_async(
        lambda: one.supervisor.pids not in ([], [first]), 5.0, message="a replacement"
    )
    replacement = one.supervisor.pids[0]
    assert replacement != standby
    assert await asyncio.to_thread(fetch, one.port) == replacement


async def test_closing_dismisses_the_standby(stacks: list[Stack], tmp_path: Path) -> None:
    one = stack(stacks, tmp_path, 0.0)
    await one.supervisor.start()
    standby = one.spawner.standby_pid
    await wait_until_async(lambda: one.has("warm", standby), 10.0, message="warm")
    await one.supervisor.stop(2.0)
    await one.spawner.close()
    assert standby is not None and gone(standby)
    assert not one.has("ready", standby)  # it never served
    with pytest.raises(RuntimeError, match="closed"):
        await one.spawner(0)


async def test_without_a_standby_none_waits_and_a_dead_worker_is_started_cold(
    stacks: list[Stack], tmp_path: Path
) -> None:
    one = stack(stacks, tmp_path, 0.0, ahead=False)
    await one.supervisor.start()
    first = one.supervisor.pids[0]
    assert one.spawner.standby_pid is None
    await wait_until_async(lambda: one.has("ready", first), 10.0, message="serving")
    os.kill(first, signal.SIGKILL)
    await wait_until_async(
        lambda: one.supervisor.pids not in ([], [first]), 10.0, message="a replacement"
    )
    replacement = one.supervisor.pids[0]
    assert await asyncio.to_thread(fetch, one.port) == replacement
    assert one.spawner.standby_pid is None
    assert one.started == [first, replacement]

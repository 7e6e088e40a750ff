"""The supervisor's decisions on fake processes and a fake clock: replacement at once, the
crash-loop backoff, the stop's SIGTERM then SIGKILL, and what it tells and shows.

The same on real processes, sockets and signals: `test_workers.py`.
"""

from __future__ import annotations

import asyncio
import itertools
import signal

import pytest

from gateway.control.supervisor import RestartBackoff, Supervisor, WorkerEvent, describe_exit
from tests.support.clock import FakeClock


class FakeChild:
    """A worker process that exits when told (``exit``) or on SIGTERM (unless it ignores it)
    and SIGKILL, recording the signals it got."""

    def __init__(self, pid: int, ignores_term: bool = False) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.signals: list[int] = []
        self.ignores_term = ignores_term
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    def exit(self, code: int) -> None:
        if not self._exit.done():
            self.returncode = code
            self._exit.set_result(code)

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        if sig == signal.SIGKILL or (sig == signal.SIGTERM and not self.ignores_term):
            self.exit(-sig)


class Spawner:
    """A `Spawn` of fake children, each with the next pid; ``failing``: raises instead."""

    def __init__(self, ignores_term: bool = False) -> None:
        self.children: dict[int, list[FakeChild]] = {}
        self._pids = itertools.count(100)
        self.ignores_term = ignores_term
        self.failing = False

    async def __call__(self, index: int) -> FakeChild:
        if self.failing:
            raise OSError("no more processes")
        child = FakeChild(next(self._pids), self.ignores_term)
        self.children.setdefault(index, []).append(child)
        return child

    def current(self, index: int) -> FakeChild:
        return self.children[index][-1]


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def test_starts_count_workers_with_their_indexes(clock: FakeClock) -> None:
    spawn, events = Spawner(), list[WorkerEvent]()
    supervisor = Supervisor(spawn, 3, clock=clock, on_event=events.append)
    await supervisor.start()
    assert sorted(spawn.children) == [0, 1, 2]
    assert supervisor.pids == [100, 101, 102]
    assert [(e.kind, e.index, e.pid) for e in events] == [
        ("started", 0, 100),
        ("started", 1, 101),
        ("started", 2, 102),
    ]
    row = supervisor.view()[1]
    assert row == {
        "index": 1,
        "pid": 101,
        "state": "running",
        "started": round(clock.wall(), 3),
        "restarts": 0,
        "exits_in_a_row": 0,
        "last_exit": None,
        "restart_in_s": None,
    }
    await supervisor.stop(1.0)


async def test_a_worker_that_dies_is_replaced_at_once_under_its_index(clock: FakeClock) -> None:
    spawn, events = Spawner(), list[WorkerEvent]()
    supervisor = Supervisor(spawn, 2, clock=clock, on_event=events.append)
    await supervisor.start()
    clock.advance(60.0)
    spawn.current(1).exit(-signal.SIGKILL)
    await turns()
    assert len(spawn.children[1]) == 2  # no time passed on the clock: replaced at once
    assert supervisor.pids == [100, 102]
    row = supervisor.view()[1]
    assert (row["pid"], row["restarts"], row["last_exit"]) == (102, 1, "killed by SIGKILL")
    exited, replaced = events[2:]
    assert (exited.kind, exited.index, exited.pid, exited.level) == ("exited", 1, 101, "bad")
    assert "killed by SIGKILL after 60.0 s up" in exited.detail
    assert (replaced.kind, replaced.index, replaced.pid) == ("replaced", 1, 102)
    await supervisor.stop(1.0)


async def test_a_crash_loop_backs_off_and_a_stable_run_resets_it(clock: FakeClock) -> None:
    spawn = Spawner()
    backoff = RestartBackoff()
    supervisor = Supervisor(spawn, 1, clock=clock, backoff=backoff)
    await supervisor.start()
    waits = []
    for _ in range(8):
        spawn.current(0).exit(3)
        await turns()
        wait = supervisor.view()[0]["restart_in_s"] or 0.0
        waits.append(wait)
        clock.advance(wait)
        await turns()
    assert waits == [0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert all(w <= 2.0 for w in waits[:5])  # the first few are all replaced within 2 s
    assert supervisor.view()[0]["restarts"] == 8
    assert supervisor.view()[0]["exits_in_a_row"] == 8
    clock.advance(backoff.stable_s)  # up long enough: the next exit is the first in a row
    spawn.current(0).exit(3)
    await turns()
    assert len(spawn.children[0]) == 10
    assert supervisor.view()[0]["exits_in_a_row"] == 1
    await supervisor.stop(1.0)


async def test_the_wait_never_exceeds_the_cap() -> None:
    backoff = RestartBackoff(max_s=30.0)
    assert [backoff.delay(n) for n in (1, 2, 5, 8, 9, 50)] == [0.0, 0.25, 2.0, 16.0, 30.0, 30.0]


async def test_a_spawn_that_fails_is_tried_again_with_the_backoff(clock: FakeClock) -> None:
    spawn = Spawner()
    supervisor = Supervisor(spawn, 1, clock=clock)
    await supervisor.start()
    spawn.failing = True
    spawn.current(0).exit(1)
    await turns()
    row = supervisor.view()[0]
    assert (row["pid"], row["state"], row["exits_in_a_row"]) == (None, "restarting", 2)
    spawn.failing = False
    clock.advance(row["restart_in_s"])
    await turns()
    assert supervisor.view()[0]["state"] == "running"
    await supervisor.stop(1.0)


async def test_stop_sends_sigterm_and_replaces_nothing(clock: FakeClock) -> None:
    spawn, events = Spawner(), list[WorkerEvent]()
    supervisor = Supervisor(spawn, 2, clock=clock, on_event=events.append)
    await supervisor.start()
    await supervisor.stop(5.0)
    children = [spawn.current(0), spawn.current(1)]
    assert [c.signals for c in children] == [[signal.SIGTERM], [signal.SIGTERM]]
    assert supervisor.pids == []
    assert [row["state"] for row in supervisor.view()] == ["stopped", "stopped"]
    assert [e.kind for e in events[2:]] == ["exited", "exited"]
    assert len(spawn.children[0]) == 1


async def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace(clock: FakeClock) -> None:
    spawn = Spawner(ignores_term=True)
    supervisor = Supervisor(spawn, 1, clock=clock)
    await supervisor.start()
    stopping = asyncio.create_task(supervisor.stop(3.0))
    await turns()
    child = spawn.current(0)
    assert child.signals == [signal.SIGTERM]
    clock.advance(2.9)
    await turns()
    assert child.signals == [signal.SIGTERM]
    clock.advance(0.1)
    await asyncio.wait_for(stopping, 1.0)
    assert child.signals == [signal.SIGTERM, signal.SIGKILL]
    assert supervisor.view()[0]["last_exit"] == "killed by SIGKILL"


async def test_stop_without_term_only_waits_then_kills(clock: FakeClock) -> None:
    spawn = Spawner()
    supervisor = Supervisor(spawn, 1, clock=clock)
    await supervisor.start()
    stopping = asyncio.create_task(supervisor.stop(1.0, term=False))
    await turns()
    spawn.current(0).exit(0)  # it was told over the link, and exits by itself
    await asyncio.wait_for(stopping, 1.0)
    assert spawn.current(0).signals == []


async def test_a_pending_replacement_is_cancelled_by_stop(clock: FakeClock) -> None:
    spawn = Spawner()
    supervisor = Supervisor(spawn, 1, clock=clock)
    await supervisor.start()
    spawn.current(0).exit(3)
    await turns()
    spawn.current(0).exit(3)  # the second in a row: replaced in 0.25 s
    await turns()
    await supervisor.stop(1.0)
    clock.advance(60.0)
    await turns()
    assert len(spawn.children[0]) == 2


async def test_a_failed_start_stops_the_workers_already_started(clock: FakeClock) -> None:
    spawn = Spawner()

    async def third_fails(index: int) -> FakeChild:
        if index == 2:
            raise FileNotFoundError("no such interpreter")
        return await spawn(index)

    supervisor = Supervisor(third_fails, 3, clock=clock)
    with pytest.raises(FileNotFoundError):
        await supervisor.start()
    assert [c.returncode for c in (spawn.current(0), spawn.current(1))] == [
        -signal.SIGTERM,
        -signal.SIGTERM,
    ]


async def test_a_failing_listener_does_not_stop_the_supervision(clock: FakeClock) -> None:
    def broken(event: WorkerEvent) -> None:
        raise RuntimeError("timeline gone")

    spawn = Spawner()
    supervisor = Supervisor(spawn, 1, clock=clock, on_event=broken)
    await supervisor.start()
    spawn.current(0).exit(1)
    await turns()
    assert len(spawn.children[0]) == 2
    await supervisor.stop(1.0)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (0, "exited with code 0"),
        (3, "exited with code 3"),
        (-9, "killed by SIGKILL"),
        (-15, "killed by SIGTERM"),
        (-200, "killed by signal 200"),
    ],
)
def test_exit_statuses_in_words(code: int, words: str) -> None:
    assert describe_exit(code) == words


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        Supervisor(Spawner(), 0)

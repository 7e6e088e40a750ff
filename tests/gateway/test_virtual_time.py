"""Virtual time: sleeps wait for their timers; an idle loop jumps to the next one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from gateway.clock import wait_first
from tests.support.virtual_time import VirtualClock, VirtualTimeLoop

T = TypeVar("T")


def run(main: Callable[[VirtualClock], Awaitable[T]]) -> T:
    clock = VirtualClock(start=0.0)

    async def go() -> T:
        return await main(clock)

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(go())


def test_concurrent_sleeps_overlap_as_real_ones_do() -> None:
    async def main(clock: VirtualClock) -> list[tuple[str, float]]:
        woke: list[tuple[str, float]] = []

        async def nap(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((name, clock.now()))

        await asyncio.gather(nap("long", 2.0), nap("short", 1.0), nap("also long", 2.0))
        return woke

    assert run(main) == [("short", 1.0), ("long", 2.0), ("also long", 2.0)]


def test_time_moves_only_once_every_task_waits() -> None:
    async def main(clock: VirtualClock) -> tuple[float, int]:
        turns = 0

        async def busy() -> None:
            nonlocal turns
            for _ in range(100):
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(busy())
        await clock.sleep(1.0)
        return clock.now(), turns if task.done() else -1

    assert run(main) == (1.0, 100)  # the busy task ran all its turns before time moved


def test_an_executor_job_in_flight_is_not_idleness() -> None:
    async def main(clock: VirtualClock) -> tuple[float, bool]:
        napper = asyncio.create_task(clock.sleep(1.0))
        total = await asyncio.get_running_loop().run_in_executor(None, sum, range(200_000))
        return clock.now(), total == sum(range(200_000)) and not napper.done()

    assert run(main) == (0.0, True)


def test_timeouts_and_waits_expire_exactly_on_time() -> None:
    async def main(clock: VirtualClock) -> list[float]:
        seen = []
        never = asyncio.get_running_loop().create_future()
        await wait_first(clock, [never], 0.25)
        seen.append(clock.now())
        with pytest.raises(TimeoutError):
            async with clock.timeout_at(0.75):
                await never
        seen.append(clock.now())
        return seen

    assert run(main) == [0.25, 0.75]


def test_idle_lets_every_other_task_run_without_moving_time() -> None:
    async def main(clock: VirtualClock) -> tuple[bool, float]:
        async def chain(depth: int) -> None:
            if depth:
                await asyncio.sleep(0)
                await asyncio.create_task(chain(depth - 1))

        task = asyncio.create_task(chain(20))
        clock.call_at(5.0, lambda: None)  # a later timer must not fire
        await clock.idle()
        return task.done(), clock.now()

    assert run(main) == (True, 0.0)


def test_manual_advance_still_works() -> None:
    async def main(clock: VirtualClock) -> float:
        napper = asyncio.create_task(clock.sleep(10.0))
        await asyncio.sleep(0)
        clock.advance(10.0)
        await napper
        return clock.now()

    assert run(main) == 10.0


def test_a_virtual_clock_on_an_ordinary_loop_fails_loudly() -> None:
    async def main() -> None:
        await VirtualClock().sleep(1.0)

    with pytest.raises(RuntimeError, match="VirtualTimeLoop"):
        asyncio.run(main())

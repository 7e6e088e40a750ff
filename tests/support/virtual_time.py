"""Virtual time for tests of concurrent code: time jumps to the next timer when all tasks wait.

A `VirtualClock` is a `FakeClock` whose ``sleep`` waits for its timer, as a real sleep does. It
moves when told (``advance``) and, on a `VirtualTimeLoop`, whenever the loop is idle: nothing is
ready to run, so the loop would block waiting for I/O or a real timer, and no executor job is
in flight. Then the clock with the nearest timer jumps to it and fires the timers due at that
instant, in the order they were set. A test of timeouts, hedges and backoff therefore runs in
microseconds, never really sleeps, and is deterministic: what happens depends only on the
order of timers, not on the speed of the machine.

Timers of a `VirtualClock` win over the loop's real ones (they are on different time lines);
code under test should take its time from the clock only. Use the loop through pytest-asyncio's
``pytest_asyncio_loop_factories`` hook (see ``tests/gateway/pipeline/conftest.py``).
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, Unpack

from gateway.clock import Timer
from tests.support.clock import FakeClock

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class VirtualClock(FakeClock):
    """A fake clock for concurrent code: sleeps wait for their timers; idle loops advance it."""

    def __init__(self, start: float = 1000.0, wall_offset: float = 1_700_000_000.0) -> None:
        super().__init__(start, wall_offset)
        self._loop: VirtualTimeLoop | None = None

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_at(self.now() + seconds, lambda: _release(waiter))
        try:
            await waiter
        finally:
            timer.cancel()

    async def idle(self) -> None:
        """Returns once every other task waits (the loop is idle); time does not move."""
        self._attach()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self._push(self.now(), lambda: _release(waiter))  # due, but fired when idle
        try:
            await waiter
        finally:
            timer.cancel()

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        self._attach()
        return super().call_at(when, callback)

    def _attach(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            if not isinstance(loop, VirtualTimeLoop):
                raise RuntimeError(
                    "a VirtualClock's timers fire only on a VirtualTimeLoop (nothing else "
                    "advances it): run the test on tests.support.virtual_time.VirtualTimeLoop"
                )
            loop.attach(self)
            self._loop = loop

    def advance_to_next(self) -> bool:
        """Jumps to the next timer and fires the timers due then; False if there is none."""
        when = self.next_timer()
        if when is None:
            return False
        self.advance_to(when)
        return True


def _release(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on which idle time is skipped: `VirtualClock`s jump to their next timer."""

    def __init__(self) -> None:
        self._clocks: list[VirtualClock] = []
        self._jobs = 0  # executor jobs in flight: a thread at work is not idleness
        super().__init__(_IdleSelector(self._on_idle))

    def attach(self, clock: VirtualClock) -> None:
        if clock not in self._clocks:
            self._clocks.append(clock)

    def run_in_executor(
        self, executor: Executor | None, func: Callable[[Unpack[Ts]], T], *args: *Ts
    ) -> asyncio.Future[T]:
        future = super().run_in_executor(executor, func, *args)
        self._jobs += 1
        future.add_done_callback(self._job_done)
        return future

    def _job_done(self, _: object) -> None:
        self._jobs -= 1

    def _on_idle(self) -> bool:
        """Advances the clock whose next timer is nearest; True if one moved."""
        if self._jobs:
            return False
        nearest: tuple[float, VirtualClock] | None = None
        for clock in self._clocks:
            when = clock.next_timer()
            if when is not None and (nearest is None or when - clock.now() < nearest[0]):
                nearest = (when - clock.now(), clock)
        return nearest is not None and nearest[1].advance_to_next()


class _IdleSelector(selectors.BaseSelector):
    """The platform's selector, except that where the loop would block it first lets
    ``on_idle`` advance virtual time; if that made callbacks ready, it only polls."""

    def __init__(self, on_idle: Callable[[], bool]) -> None:
        self._inner = selectors.DefaultSelector()
        self._on_idle = on_idle

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if (timeout is None or timeout > 0) and self._on_idle():
            timeout = 0
        return self._inner.select(timeout)

    def register(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: FileDescriptorLike) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(
        self, fileobj: FileDescriptorLike, events: int, data: Any = None
    ) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def get_map(self) -> Mapping[FileDescriptorLike, selectors.SelectorKey]:
        return self._inner.get_map()

    def close(self) -> None:
        self._inner.close()

"""A manual clock for tests: `FakeClock` moves only when told, and never waits for real.

It implements `gateway.clock.Clock`: ``advance`` moves time and fires the timers it passes, in
order, each at its own time; ``sleep`` advances it at once, as if the sleeper were the only task
(one background loop under test). For concurrent code use `tests.support.virtual_time`, whose
clock's sleeps wait for their timers while the loop skips idle time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from gateway.clock import Clock, Timer


class FakeTimer:
    """A timer of a fake clock; cancelled ones stay in the heap until their time passes."""

    __slots__ = ("callback", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback: Callable[[], object] | None = callback

    def cancel(self) -> None:
        self.callback = None


class FakeClock:
    """A clock that moves only when told; ``sleep`` advances it instead of waiting."""

    def __init__(self, start: float = 1000.0, wall_offset: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_offset
        self._timers: list[tuple[float, int, FakeTimer]] = []
        self._order = itertools.count()  # timers due at the same time fire in creation order
        self.slept: list[float] = []

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def set_wall(self, wall: float) -> None:
        """Makes ``wall()`` read ``wall`` now, without moving monotonic time or firing timers."""
        self._wall_offset = wall - self._now

    def advance(self, seconds: float) -> None:
        self.advance_to(self._now + seconds)

    def advance_to(self, when: float) -> None:
        """Moves time to ``when``, firing the timers it passes in order, each at its own time."""
        while self._timers and self._timers[0][0] <= when:
            due, _, timer = heapq.heappop(self._timers)
            callback, timer.callback = timer.callback, None
            if callback is not None:
                self._now = max(self._now, due)
                callback()
        self._now = max(self._now, when)

    def next_timer(self) -> float | None:
        """When the earliest live timer is due (None: no timer)."""
        timers = self._timers
        while timers and timers[0][2].callback is None:
            heapq.heappop(timers)
        return timers[0][0] if timers else None

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))
        await asyncio.sleep(0)

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        if when <= self._now:  # already due: at the loop's next turn, as asyncio does
            return asyncio.get_running_loop().call_soon(callback)
        return self._push(when, callback)

    def _push(self, when: float, callback: Callable[[], object]) -> FakeTimer:
        timer = FakeTimer(when, callback)
        heapq.heappush(self._timers, (when, next(self._order), timer))
        return timer

    def timeout_at(self, when: float) -> AbstractAsyncContextManager[object]:
        return _timeout_at(self, when)


class _TimeoutAt:
    """`asyncio.timeout_at` on ``clock``'s time: the clock's timer expires an open asyncio scope."""

    __slots__ = ("_clock", "_scope", "_timer", "_when")

    def __init__(self, clock: Clock, when: float) -> None:
        self._clock, self._when = clock, when
        self._scope = asyncio.timeout(None)
        self._timer: Timer | None = None

    async def __aenter__(self) -> None:
        await self._scope.__aenter__()
        self._timer = self._clock.call_at(self._when, self._expire)

    def _expire(self) -> None:
        self._scope.reschedule(-math.inf)

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None  # no cycle through the timer's callback
        await self._scope.__aexit__(kind, error, tb)


def _timeout_at(clock: Clock, when: float) -> AbstractAsyncContextManager[None]:
    return _TimeoutAt(clock, when)

"""Injected time: the `Clock` protocol, the real clock on the event loop, and a manual fake.

Every timer-driven decision reads and waits on time through a `Clock`: deadlines, per-try
timeouts, hedge delays, backoff, a vote's straggler grace, ejection times, breaker timeouts,
SLO windows. So tests move time explicitly instead of sleeping.

- `MonotonicClock`: the real one; its timers are the event loop's own.
- `FakeClock`: moves only when told (`advance`); timers fire as time passes them, and ``sleep``
  advances it at once, as if the sleeper were the only task (one background loop under test).
- `gateway.virtual_time.VirtualClock`: for concurrent code: a sleep waits for its timer and,
  when every task is waiting, time jumps to the next timer. The pipeline's tests run on it.

`wait_first` is the one waiting primitive the layers need beyond ``sleep`` and ``timeout_at``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Callable, Collection
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...

    def wall(self) -> float:
        """Unix seconds, for display and for state shared between processes."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Calls ``callback`` on the loop once the clock reaches ``when`` (soon, if past)."""
        ...

    def timeout_at(self, when: float) -> AbstractAsyncContextManager[object]:
        """A scope cancelled at ``when``, which then raises `TimeoutError` (as
        `asyncio.timeout_at`)."""
        ...


async def wait_first(
    clock: Clock, futures: Collection[asyncio.Future[Any]], until: float | None
) -> None:
    """Returns once one of ``futures`` is done or ``clock`` reaches ``until`` (None: no limit).

    Cancels nothing: `asyncio.wait` with ``FIRST_COMPLETED`` and a timeout, on ``clock``'s time.
    """
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    timer = None if until is None else clock.call_at(until, wake)
    for future in futures:
        future.add_done_callback(wake)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        for future in futures:
            future.remove_done_callback(wake)


TIMER_SLACK_S = 0.001  # uvloop's timers count whole milliseconds and may fire up to ~1 ms early


class MonotonicClock:
    """The real clock. Its timers are the running loop's, converted from `time.monotonic`.

    A timer never fires before ``now()`` reaches its time: uvloop's ``loop.time()`` counts whole
    milliseconds, so its timers fire up to about a millisecond early by `time.monotonic`. A
    deadline whose timer fired must also read as passed (a 504 is decided on both), so an early
    timer is put back for what is left, plus the loop's slack.
    """

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        return _NeverEarly(asyncio.get_running_loop(), when, callback)

    def timeout_at(self, when: float) -> AbstractAsyncContextManager[object]:
        return _MonotonicTimeoutAt(when)


class _MonotonicTimeoutAt:
    """`asyncio.timeout_at` on `time.monotonic` that never expires early: one object and one
    loop timer per scope (every request's deadline scope is one of these, so it is lean: an
    `asyncio.timeout` under a `_NeverEarly` timer cost 10.4 µs and made a reference cycle).

    The timer cancels the task; on exit, if it fired and no other cancellation came since
    entry, the `CancelledError` becomes `TimeoutError` (as `asyncio.Timeout` does).
    """

    __slots__ = ("_cancelling", "_expired", "_handle", "_loop", "_task", "_when")

    def __init__(self, when: float) -> None:
        self._when = when
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("timeout_at must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._loop = loop = asyncio.get_running_loop()
        self._handle = loop.call_later(self._when - time.monotonic(), self._fire)

    def _fire(self) -> None:
        left = self._when - time.monotonic()
        if left > 0:  # uvloop fired early (whole milliseconds): never expire before the time
            self._handle = self._loop.call_later(left + TIMER_SLACK_S, self._fire)
            return
        self._handle = None
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if not self._expired:
            return
        if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from error


class _NeverEarly:
    """A loop timer for ``when`` on `time.monotonic`, rescheduled if the loop fires it early."""

    __slots__ = ("_callback", "_handle", "_loop", "_when")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, when: float, callback: Callable[[], object]
    ) -> None:
        self._loop, self._when, self._callback = loop, when, callback
        self._handle = loop.call_later(when - time.monotonic(), self._fire)

    def _fire(self) -> None:
        left = self._when - time.monotonic()
        if left > 0:
            self._handle = self._loop.call_later(left + TIMER_SLACK_S, self._fire)
            return
        self._callback()

    def cancel(self) -> None:
        self._handle.cancel()


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

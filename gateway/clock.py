"""Injected time: the `Clock` protocol and the real clock on the event loop.

Every timer-driven decision reads and waits on time through a `Clock`: deadlines, per-try
timeouts, hedge delays, backoff, a vote's straggler grace, ejection times, breaker timeouts,
SLO windows. So tests move time explicitly instead of sleeping.

- `MonotonicClock`: the real one; its timers are the event loop's own.
- The tests' clocks (a manual `FakeClock`, and virtual time for concurrent code) live in
  ``tests/support/``, outside the wheel.

`wait_first` is the one waiting primitive the layers need beyond ``sleep`` and ``timeout_at``.
"""

from __future__ import annotations

import asyncio
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


# uvloop's timers count whole milliseconds and may fire up to one early
TIMER_SLACK_S = 0.001


class MonotonicClock:
    """The real clock. Its timers are the running loop's, converted from `time.monotonic`.

    A timer never fires before ``now()`` reaches its time: uvloop's ``loop.time()`` counts whole
    milliseconds, so its timers fire up to about a millisecond early by `time.monotonic`. A
    deadline whose timer fired must also read as passed (a 504 is decided on both), so an early
    timer is put back for what is left, plus the loop's slack.
    """

    # The clock functions themselves: a read is one C call, not a method around one.
    now = staticmethod(time.monotonic)
    wall = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        return _NeverEarly(asyncio.get_running_loop(), when, callback)

    def timeout_at(self, when: float) -> AbstractAsyncContextManager[object]:
        return _MonotonicTimeoutAt(when)


class _MonotonicTimeoutAt:
    """`asyncio.timeout_at` on `time.monotonic` that never expires early: one object and one
    loop timer per scope (every request's deadline scope is one of these, so it is lean: an
    `asyncio.timeout` under a `_NeverEarly` timer cost more and made a reference cycle).

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
        if left > 0:
            # uvloop fired early (whole milliseconds): never expire before the time
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

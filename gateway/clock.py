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
        return _MonotonicTimeoutAt(when, self)

    # the open timeout scopes, of the loop that last opened one
    _scopes: _Scopes | None = None

    def _scopes_of(self, loop: asyncio.AbstractEventLoop) -> _Scopes:
        scopes = self._scopes
        if scopes is None or scopes.loop is not loop:
            scopes = self._scopes = _Scopes(loop)
        return scopes


class _MonotonicTimeoutAt:
    """`asyncio.timeout_at` on `time.monotonic` that never expires early: one object per scope,
    kept with the loop's other open scopes under one timer (`_Scopes`). Every request's deadline
    scope is one of these, so it is lean: an `asyncio.timeout` under a `_NeverEarly` timer cost
    more and made a reference cycle, and a loop timer of its own cost more than the rest of it.

    Expiry cancels the task; on exit, if it expired and no other cancellation came since
    entry, the `CancelledError` becomes `TimeoutError` (as `asyncio.Timeout` does).
    """

    __slots__ = ("_cancelling", "_clock", "_expired", "_scopes", "_task", "open", "when")

    def __init__(self, when: float, clock: MonotonicClock) -> None:
        self.when = when
        self.open = False
        self._expired = False
        self._clock = clock

    async def __aenter__(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("timeout_at must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self.open = True
        self._scopes = self._clock._scopes_of(loop)
        self._scopes.add(self)

    def expire(self) -> None:
        """Its time has come (`_Scopes`): the task is cancelled."""
        self.open = False
        self._expired = True
        self._task.cancel()

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        # ended in time; it may wait in the heap a while, holding no task
        if self.open:
            self.open = False
            del self._task
            self._scopes.ended()
            return
        if not self._expired:
            return
        if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from error


class _Scopes:
    """The open timeout scopes of one loop, in a heap by time, under one loop timer.

    A loop timer created and cancelled for every request costs more than the rest of its
    deadline's bookkeeping; so one timer is armed for the earliest scope's time. A scope that
    ends leaves the heap once it reaches the top (at once, the usual case: requests with one
    timeout end in about the order they began), and the timer is left to run (lazy, as
    `gateway.upstream.transport.deadline_timer`): when it fires, the scopes whose time has come
    by `time.monotonic` expire and it is re-armed for the next (plus the loop's slack: uvloop
    fires up to a millisecond early), so none expires early. Ended scopes deeper in the heap
    are swept out whenever they outnumber the open ones (and a few more).
    """

    __slots__ = ("_armed_at", "_heap", "_open", "_order", "_timer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._heap: list[tuple[float, int, _MonotonicTimeoutAt]] = []
        # ties in time: first come, first out
        self._order = itertools.count()
        self._open = 0
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def add(self, scope: _MonotonicTimeoutAt) -> None:
        when = scope.when
        heapq.heappush(self._heap, (when, next(self._order), scope))
        self._open += 1
        if when < self._armed_at:
            self._arm(when, 0.0)

    def ended(self) -> None:
        """A scope ended before its time."""
        self._open -= 1
        heap = self._heap
        while heap and not heap[0][2].open:
            heapq.heappop(heap)
        if len(heap) > 2 * self._open + _SWEEP_ABOVE:
            self._heap = [entry for entry in heap if entry[2].open]
            heapq.heapify(self._heap)

    def _arm(self, when: float, slack: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = self.loop.call_later(when - time.monotonic() + slack, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._armed_at = math.inf
        heap = self._heap
        now = time.monotonic()
        while heap and (heap[0][0] <= now or not heap[0][2].open):
            scope = heapq.heappop(heap)[2]
            if scope.open:
                self._open -= 1
                scope.expire()
        if heap:
            self._arm(heap[0][0], TIMER_SLACK_S)


# ended scopes kept in a heap beyond twice the open ones
_SWEEP_ABOVE = 64


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

"""One loop timer for all of a keep-alive connection's exchanges, never late and never early.

Creating and cancelling a loop timer per exchange costs more on uvloop than the exchange's own
bookkeeping, so a connection keeps one: armed for the first exchange's deadline, it stays armed
after a reply. An exchange whose deadline is no earlier keeps it; when it fires for a deadline
that is not the current exchange's, it is re-armed for the current one's; an idle connection
lets it lapse (the next exchange arms its own). So no exchange times out late, or early.
"""

from __future__ import annotations

import asyncio


class DeadlineTimer:
    """What `gateway.upstream.transport.http1_connection.Connection` mixes in: the timer's state
    (``_timer`` armed for ``_armed_at``; ``_deadline``, the current exchange's) and its rules.
    The connection says whether an exchange is in progress (`_busy`) and what a timeout does
    (`_time_out`); `exchange` sets ``_deadline`` and arms the timer when it is due earlier."""

    _loop: asyncio.AbstractEventLoop
    _timer: asyncio.TimerHandle | None = None
    _armed_at = 0.0
    _deadline = 0.0

    def _busy(self) -> bool:
        raise NotImplementedError

    def _time_out(self) -> None:
        raise NotImplementedError

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self._busy():
            # idle: the next exchange arms a timer of its own
            return
        if self._deadline > self._armed_at:
            # armed for an earlier exchange's deadline
            self._arm(self._deadline)
            return
        self._time_out()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

"""A background task that calls a function every ``interval_s`` on the injected clock.

For small periodic chores (evaluating SLO alerts) that must never run on a request's path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.clock import Clock

log = logging.getLogger(__name__)


class Periodic:
    def __init__(
        self, name: str, interval_s: float, clock: Clock, work: Callable[[], None]
    ) -> None:
        self._name = name
        self._interval_s = interval_s
        self._clock = clock
        self._work = work
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            try:
                self._work()
            except Exception:  # a chore's bug must not kill the chore for good
                log.exception("periodic task %s failed", self._name)

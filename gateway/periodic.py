"""Background tasks beside the request path: `BackgroundTask` (one named task, started and
stopped once) and `Periodic` (a function every ``interval_s`` on the injected clock).

For small chores (evaluating SLO alerts, fetching metadata) that must never run on a
request's path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway.clock import Clock

log = logging.getLogger(__name__)


class BackgroundTask:
    """One named task running ``_run``: started once, cancelled and awaited by ``stop``."""

    def __init__(self, name: str) -> None:
        self._name = name
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
        raise NotImplementedError


class Periodic(BackgroundTask):
    def __init__(
        self, name: str, interval_s: float, clock: Clock, work: Callable[[], None]
    ) -> None:
        super().__init__(name)
        self._interval_s = interval_s
        self._clock = clock
        self._work = work

    async def _run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            try:
                self._work()
            except Exception:
                # a chore's bug must not kill the chore for good
                log.exception("periodic task %s failed", self._name)

"""The rollouts' background chores: judge held steps, adopt progress decided elsewhere, and
publish decisions taken here (to ``state.decisions_file`` and the shared store) at once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gateway.clock import Clock
from gateway.periodic import BackgroundTask
from gateway.rollout.controller import Rollouts

log = logging.getLogger(__name__)
TICK_S = 0.25


class RolloutTicker(BackgroundTask):
    def __init__(
        self,
        rollouts: Rollouts,
        publish: Callable[[], Awaitable[str | None]],
        clock: Clock,
        interval_s: float = TICK_S,
    ) -> None:
        super().__init__("rollouts")
        self._rollouts = rollouts
        self._publish = publish
        self._clock = clock
        self._interval_s = interval_s

    async def _run(self) -> None:
        while True:
            try:
                self._rollouts.tick()
                if self._rollouts.unpublished:
                    self._rollouts.unpublished = False
                    failed = await self._publish()
                    if failed is not None:
                        self._rollouts.unpublished = True  # offered again next tick
                        log.warning("rollout decisions not shared yet: %s", failed)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("rollout tick failed")
            await self._clock.sleep(self._interval_s)

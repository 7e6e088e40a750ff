"""Keeps the fallback's verification current: periodically, and soon after its files change.

A fallback verified at start-up can be replaced or tampered with later; the watcher polls the
cheap (mtime, size) stamps of the manifest, model and golden files every ``poll_s`` and runs the
full verification when they change or ``interval_s`` has passed since the last one (a periodic
re-hash also catches a change that kept mtime and size). Status changes are logged once, by the
model, however often it is checked.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.clock import Clock
from gateway.fallback.manifest import FileStamp
from gateway.fallback.model import FallbackModel

log = logging.getLogger(__name__)


class FallbackWatcher:
    def __init__(
        self,
        model: FallbackModel,
        clock: Clock,
        interval_s: float,
        *,
        poll_s: float | None = None,
    ) -> None:
        if interval_s <= 0 or (poll_s is not None and poll_s <= 0):
            raise ValueError("interval_s and poll_s must be positive")
        self._model = model
        self._clock = clock
        self.interval_s = interval_s
        self.poll_s = min(interval_s, 1.0) if poll_s is None else poll_s
        self._stamps: tuple[FileStamp | None, ...] | None = None
        self._verified_at: float | None = None
        self._task: asyncio.Task[None] | None = None
        self.checks = 0

    def start(self) -> None:
        if self._task is None:
            name = f"fallback-watch:{self._model.name}"
            self._task = asyncio.create_task(self._run(), name=name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def check(self) -> bool:
        """One poll: verifies if the files changed or the interval passed; True if it did."""
        self.checks += 1
        stamps = await self._model.stamps()
        now = self._clock.now()
        due = self._verified_at is None or now - self._verified_at >= self.interval_s
        changed = self._stamps is not None and stamps != self._stamps
        if not (due or changed):
            return False
        if changed:
            log.info("fallback %s: files changed, verifying again", self._model.name)
        self._stamps = stamps
        self._verified_at = now
        await self._model.verify()
        return True

    async def _run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                # a watcher that dies silently would freeze a stale verdict
                log.exception("fallback %s: check failed", self._model.name)
            await self._clock.sleep(self.poll_s)

"""The shape every prober shares: loops over the registry's pools, run as background tasks.

Health probes and golden (correctness) probes differ in what they send and how they judge
it; starting one task per loop and cancelling them all on stop is written once, here. Loops
are named; one may also be started or stopped alone (a replica joined or left its pool).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

from gateway.clock import Clock
from gateway.upstream.registry import Registry
from gateway.upstream.transport.base import Transport

# a loop still running this long after its cancellation is cancelled again
STOP_AGAIN_S = 0.1


class Prober:
    def __init__(
        self, registry: Registry, transport: Transport, clock: Clock, rng: random.Random
    ) -> None:
        self._registry = registry
        self._transport = transport
        self._clock = clock
        self._rng = rng
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self) -> None:
        """Starts the loops `loops` names (subclasses say which)."""
        for name, loop in self.loops():
            self.start_loop(name, loop)

    def start_loop(self, name: str, loop: Coroutine[Any, Any, None]) -> None:
        """Starts one loop; one already running under ``name`` is replaced."""
        self.stop_loop(name)
        self._tasks[name] = asyncio.create_task(loop, name=name)

    def stop_loop(self, name: str) -> None:
        """Cancels the loop named ``name``, if running (it ends at its next await)."""
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()

    def loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        raise NotImplementedError

    async def stop(self) -> None:
        """Cancels every loop and returns once all have ended. A loop is cancelled again
        while it runs on: in Python 3.11 `asyncio.wait_for` swallows a cancellation that
        lands as its inner future finishes (a transport or a fake that uses it), and the
        loop would go on."""
        pending = set(self._tasks.values())
        while pending:
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=STOP_AGAIN_S)
        self._tasks.clear()

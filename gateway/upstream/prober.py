"""The shape every prober shares: loops over the registry's pools, run as background tasks.

Health probes and golden (correctness) probes differ in what they send and how they judge
it; starting one task per loop and cancelling them all on stop is written once, here.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

from gateway.clock import Clock
from gateway.upstream.registry import Registry
from gateway.upstream.transport import Transport


class Prober:
    def __init__(
        self, registry: Registry, transport: Transport, clock: Clock, rng: random.Random
    ) -> None:
        self._registry = registry
        self._transport = transport
        self._clock = clock
        self._rng = rng
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Starts the loops `loops` names (subclasses say which)."""
        for name, loop in self.loops():
            self._tasks.append(asyncio.create_task(loop, name=name))

    def loops(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        raise NotImplementedError

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

"""Answers still on their way: exchanges a speculative try gave up waiting for.

When a try is slow, the retry goes to another replica but the slow exchange keeps running (see
`AttemptLayer`); whichever answers first wins. This is hedging driven by the learned per-try
timeout, and it means giving up early never throws away an answer that was about to arrive.
A race cancelled stops its own try; the pending exchanges are left to whoever cancelled it
(the admission layer stops them when the client leaves: `gateway.cancel`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from gateway.call import InferAnswer
from gateway.cancel import cancel_all
from gateway.errors import UpstreamError


class PendingAnswers:
    def __init__(self) -> None:
        self._tasks: list[asyncio.Future[InferAnswer]] = []

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def keep(self, error: UpstreamError) -> None:
        if error.pending is not None:
            self._tasks.append(error.pending)

    async def race(self, attempt: Awaitable[InferAnswer]) -> InferAnswer:
        """The attempt's result, unless a pending exchange answers well first."""
        if not self._tasks:
            return await attempt
        main = asyncio.ensure_future(attempt)
        try:
            while True:
                done, _ = await asyncio.wait(
                    {main, *self._tasks}, return_when=asyncio.FIRST_COMPLETED
                )
                if main in done:
                    return main.result()
                won = self._settle(done)
                if won is not None:
                    main.cancel()
                    return won
        except asyncio.CancelledError:
            await cancel_all((main,))
            raise

    async def first_good(self) -> InferAnswer | None:
        """Waits for the first pending exchange that answers well; None if none does."""
        while self._tasks:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            won = self._settle(done)
            if won is not None:
                return won
        return None

    def _settle(self, done: set[asyncio.Future[InferAnswer]]) -> InferAnswer | None:
        for task in [t for t in self._tasks if t in done]:
            # the order they were sent in
            self._tasks.remove(task)
            if not task.cancelled() and task.exception() is None:
                return task.result()
        return None

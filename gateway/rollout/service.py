"""The rollouts' background chores: renew this gateway's leases (a fleet), judge held steps,
adopt progress decided elsewhere, and publish decisions taken here (``state.decisions_file``
and the shared store) at once.

A lease lives `LEASE_TTL_S` and is renewed every `LEASE_RENEW_S`; a gateway that cannot reach
the store loses its lead when its lease would have lapsed at the latest (it stops advancing at
once: an unanswered renewal counts as lost). On stop the leases are given back, so that another
gateway of the fleet leads at once instead of after the TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from gateway.clock import Clock
from gateway.periodic import BackgroundTask
from gateway.rollout.controller import Rollouts
from gateway.rollout.lag import LoopLag
from gateway.rollout.progress import rollout_key
from gateway.state.base import StoreUnavailable
from gateway.state.lease import Lease

log = logging.getLogger(__name__)
TICK_S = 0.25
LEASE_RENEW_S = 1.0
LEASE_TTL_S = 5.0
RELEASE_TIMEOUT_S = 1.0
TakeLease = Callable[[str, float, bool], Awaitable[Lease | None]]


class RolloutTicker(BackgroundTask):
    def __init__(
        self,
        rollouts: Rollouts,
        publish: Callable[[], Awaitable[str | None]],
        clock: Clock,
        lease: TakeLease | None = None,
        interval_s: float = TICK_S,
    ) -> None:
        """``lease``: takes, renews or gives back this gateway's lease (a fleet's store)."""
        super().__init__("rollouts")
        self._rollouts = rollouts
        self._publish = publish
        self._clock = clock
        self._lease = lease
        self._interval_s = interval_s
        self._renew_at = float("-inf")
        # read by the copies' shedding
        self._lag = LoopLag(clock)
        rollouts.loop_lag = lambda: self._lag.lag_s

    def start(self) -> None:
        super().start()
        if self._rollouts.runs:
            self._lag.start()

    async def _run(self) -> None:
        while True:
            try:
                await self._renew()
                self._rollouts.tick()
                if self._rollouts.unpublished:
                    self._rollouts.unpublished = False
                    failed = await self._publish()
                    if failed is not None:
                        # offered again next tick
                        self._rollouts.unpublished = True
                        log.warning("rollout decisions not shared yet: %s", failed)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("rollout tick failed")
            await self._clock.sleep(self._interval_s)

    async def _renew(self) -> None:
        if self._lease is None or self._clock.now() < self._renew_at:
            return
        self._renew_at = self._clock.now() + LEASE_RENEW_S
        for model in self._rollouts.declared:
            try:
                lease = await self._lease(rollout_key(model), LEASE_TTL_S, False)
            except StoreUnavailable as exc:
                log.warning("rollout of %s: lease not renewed: %s", model, exc)
                lease = None
            self._rollouts.leased(model, lease)

    async def stop(self) -> None:
        await self._lag.stop()
        await super().stop()
        if self._lease is None:
            return
        for model in self._rollouts.declared:
            with contextlib.suppress(StoreUnavailable, TimeoutError):
                async with asyncio.timeout(RELEASE_TIMEOUT_S):
                    await self._lease(rollout_key(model), LEASE_TTL_S, True)

"""How late the event loop runs a timer: the gateway's own CPU saturation, sampled.

Shadow copies are work no client asked for, so they go first when the gateway is busy: a copy
is not sent while timers run later than the rollout's ``shed_loop_lag_ms``. The lag is the
worst recent overshoot of a short sleep, decaying (``max(sample, lag × decay)``), so one
spike sheds copies for a few hundred milliseconds and a saturated loop sheds them until it
recovers. Sampling costs one wake-up every `INTERVAL_S`.
"""

from __future__ import annotations

from gateway.clock import Clock
from gateway.periodic import BackgroundTask

INTERVAL_S = 0.02
# per sample: a spike reads a tenth of itself half a second later
DECAY = 0.9


class LoopLag(BackgroundTask):
    def __init__(self, clock: Clock, interval_s: float = INTERVAL_S, decay: float = DECAY) -> None:
        super().__init__("loop-lag")
        self._clock = clock
        self._interval_s = interval_s
        self._decay = decay
        self.lag_s = 0.0

    def sample(self, slept_s: float) -> None:
        """One sleep of `INTERVAL_S` took ``slept_s``."""
        late = max(0.0, slept_s - self._interval_s)
        self.lag_s = max(late, self.lag_s * self._decay)

    async def _run(self) -> None:
        while True:
            started = self._clock.now()
            await self._clock.sleep(self._interval_s)
            self.sample(self._clock.now() - started)

"""The bound on shadow copies: at most ``shadow_concurrency`` in flight and
``shadow_rate_per_s`` a second (a token bucket, one second of burst), on the injected clock.

Shadow copies are extra work a model's clients did not ask for, so they are the first thing
shed: over either bound a copy is simply not sent (counted), never queued.
"""

from __future__ import annotations

from gateway.clock import Clock
from gateway.config.rollout import RolloutConfig


class ShadowGate:
    def __init__(self, config: RolloutConfig, clock: Clock) -> None:
        self._clock = clock
        self._concurrency = config.shadow_concurrency
        self._rate = config.shadow_rate_per_s
        self._burst = max(1.0, config.shadow_rate_per_s)
        self._tokens = self._burst
        self._last = clock.now()
        self.in_flight = 0

    def admit(self) -> str | None:
        """Takes a slot and a token for one copy; else says why not (and takes nothing)."""
        if self.in_flight >= self._concurrency:
            return "concurrency"
        now = self._clock.now()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens < 1:
            return "rate"
        self._tokens -= 1
        self.in_flight += 1
        return None

    def release(self) -> None:
        self.in_flight -= 1

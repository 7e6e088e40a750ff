"""The bound on copies no client asked for (a rollout's shadow copies, a model's audits): at
most ``concurrency`` in flight and ``rate_per_s`` a second (a token bucket, one second of
burst), on the injected clock.

Such copies are extra work a model's clients did not ask for, so they are the first thing
shed: over either bound a copy is simply not sent (counted by its owner), never queued.
"""

from __future__ import annotations

from gateway.clock import Clock


class CopyGate:
    def __init__(self, concurrency: int, rate_per_s: float, clock: Clock) -> None:
        self._clock = clock
        self._concurrency = concurrency
        self._rate = rate_per_s
        self._burst = max(1.0, rate_per_s)
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

"""A token bucket: at most ``burst`` requests at once, refilled at ``rate_per_s``.

Over any interval of length t it admits at most ``burst + rate_per_s × t`` requests, and a
refused request learns how long until a token is back (the 429's ``Retry-After``). Time comes
from an injected clock; the bucket refills lazily when asked, so it has no timer.
"""

from __future__ import annotations

from gateway.clock import Clock


class TokenBucket:
    __slots__ = ("_at", "_burst", "_clock", "_rate", "_tokens")

    def __init__(self, rate_per_s: float, burst: int, clock: Clock) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate_per_s > 0 and burst >= 1")
        self._rate = rate_per_s
        self._burst = float(burst)
        self._clock = clock
        # a new bucket is full
        self._tokens = float(burst)
        self._at = clock.now()

    @property
    def rate_per_s(self) -> float:
        return self._rate

    def take(self) -> float:
        """Takes a token: 0.0 if there was one, else the seconds until one (nothing taken)."""
        now = self._clock.now()
        tokens = self._tokens + max(0.0, now - self._at) * self._rate
        if tokens > self._burst:
            tokens = self._burst
        self._at = now
        if tokens >= 1.0:
            self._tokens = tokens - 1.0
            return 0.0
        self._tokens = tokens
        return (1.0 - tokens) / self._rate

    def tokens(self) -> float:
        """Tokens available now (for state pages and tests)."""
        elapsed = max(0.0, self._clock.now() - self._at)
        return min(self._burst, self._tokens + elapsed * self._rate)

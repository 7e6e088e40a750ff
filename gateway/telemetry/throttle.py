"""Per-event rate limiting for noisy log lines (a vote's dissents, say).

Each key (say, a replica's dissents on one model) writes at most one line per interval; the
next line it writes says how many were held back meanwhile, so nothing is lost from the
count and the log stays readable. The clock is injected, so tests move time, not sleep.
"""

from __future__ import annotations

from collections.abc import Hashable

from gateway.clock import Clock

MAX_KEYS = 1024  # keys are bounded upstream (replicas × models); this only guards memory


class LogThrottle:
    """Bounded by count: at most `MAX_KEYS` keys are remembered; past that, all are forgotten
    at once (each writes its next line at once), so a stream of new keys cannot grow it."""

    def __init__(self, clock: Clock, interval_s: float = 10.0) -> None:
        self._clock = clock
        self._interval_s = interval_s
        self._next: dict[Hashable, float] = {}
        self._held: dict[Hashable, int] = {}

    def allow(self, key: Hashable) -> int | None:
        """None: hold this line back; else write it, noting the returned count held back."""
        now = self._clock.now()
        if now < self._next.get(key, float("-inf")):
            self._held[key] = self._held.get(key, 0) + 1
            return None
        if len(self._next) >= MAX_KEYS and key not in self._next:
            self._next.clear()
            self._held.clear()
        self._next[key] = now + self._interval_s
        return self._held.pop(key, 0)

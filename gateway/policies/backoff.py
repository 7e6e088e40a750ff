"""Exponential backoff with full jitter, as a tenacity wait with injected randomness.

``wait = uniform(0, min(cap, base × 2^n))`` (AWS's "full jitter"; Envoy's retry back-off) spreads
retries of many clients over time so a recovering replica is not hit by a synchronized wave.
tenacity's own ``wait_random_exponential`` draws from the global ``random``; this one takes a
seeded `random.Random` so tests are exact.
"""

from __future__ import annotations

import random

from tenacity import RetryCallState
from tenacity.wait import wait_base


class FullJitter(wait_base):
    """A tenacity ``wait`` (composable with ``+``); `RetryPolicy` calls `for_retry` directly."""

    def __init__(self, base_s: float, cap_s: float, rng: random.Random) -> None:
        self._base_s = base_s
        self._cap_s = cap_s
        self._rng = rng

    def for_retry(self, retry_number: int) -> float:
        """The wait before retry ``retry_number`` (0 = the first retry)."""
        ceiling = min(self._cap_s, self._base_s * (2.0**retry_number))
        return self._rng.uniform(0.0, ceiling)

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.for_retry(retry_state.attempt_number)

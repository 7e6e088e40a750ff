"""Exponential backoff with full jitter: tenacity's exponential wait, drawn from an injected rng.

``wait = uniform(0, min(cap, base × 2^(n-1)))`` after the n-th try (AWS's "full jitter"; Envoy's
retry back-off) spreads retries of many clients over time so a recovering replica is not hit by
a synchronized wave. tenacity's ``wait_exponential`` computes the ceiling from its
`RetryCallState` (``attempt_number``: the tries made so far), capped and safe from overflow;
its own ``wait_random_exponential`` draws from the global ``random``, so this one draws from a
seeded `random.Random` instead and tests are exact.
"""

from __future__ import annotations

import random

from tenacity import RetryCallState
from tenacity.wait import wait_exponential


class FullJitter(wait_exponential):
    """A tenacity ``wait`` (composable with ``+``): uniform in [0, the exponential ceiling]."""

    def __init__(self, base_s: float, cap_s: float, rng: random.Random) -> None:
        super().__init__(multiplier=base_s, max=cap_s)
        self._rng = rng

    def __call__(self, retry_state: RetryCallState) -> float:
        return self._rng.uniform(0.0, super().__call__(retry_state))

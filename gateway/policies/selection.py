"""Replica selection: power-of-two-choices on least outstanding, tie-broken by EWMA latency.

P2C gets close to least-loaded without scanning or a global lock, and avoids herding every
request onto the one replica that looked best a moment ago (Mitzenmacher; Envoy's LEAST_REQUEST).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.upstream.replica import Replica


class PowerOfTwoChoices:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[Replica]) -> Replica | None:
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        first, second = self._rng.sample(candidates, 2)
        return min(first, second, key=_load)


def _load(replica: Replica) -> tuple[int, float]:
    return (replica.outstanding, replica.ewma_latency_s)

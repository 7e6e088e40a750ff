"""Replica selection: power-of-two-choices on least outstanding, tie-broken by EWMA latency.

Load is ``(outstanding + 1) / weight``: at weight 1 (every replica, unless the hardware rules
lowered it for a throttled GPU) the order is plain least outstanding; at 0.25 an idle
replica counts as one with 3 requests in flight.

P2C gets close to least-loaded without scanning or a global lock, and avoids herding every
request onto the one replica that looked best a moment ago (Mitzenmacher; Envoy's LEAST_REQUEST).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar


class Loaded(Protocol):
    """What selection reads of a replica: its load now and its recent latency."""

    @property
    def outstanding(self) -> int: ...

    @property
    def ewma_latency_s(self) -> float: ...

    @property
    def weight(self) -> float: ...


R = TypeVar("R", bound=Loaded)


class PowerOfTwoChoices:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[R]) -> R | None:
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        # Two distinct candidates, uniformly (as ``Random.sample(candidates, 2)``, for a tenth
        # of its calls: this runs on every attempt): the first of all, the second of the rest.
        count = len(candidates)
        i = int(self._rng.random() * count)
        j = int(self._rng.random() * (count - 1))
        first, second = candidates[i], candidates[j + 1 if j >= i else j]
        return min(first, second, key=_load)


def _load(replica: Loaded) -> tuple[float, float]:
    return ((replica.outstanding + 1) / replica.weight, replica.ewma_latency_s)

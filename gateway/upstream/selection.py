"""Replica selection: power-of-two-choices on least load, tie-broken by EWMA latency.

Load is ``(outstanding + 1) / weight``: at weight 1 (every replica, unless the accelerator rules
lowered it for a throttled GPU) the order is plain least outstanding; at 0.25 an idle
replica counts as one with 3 requests in flight. Where both candidates reported their load
recently (a pool with ``load_aware``: `gateway.config.load`), their reported queue counts
too: ``(reported queue + outstanding + 1) / weight``, so a replica whose queue is deep from
other clients, other gateways or other workers is passed over although this gateway sends
it little. A pair where either reading is stale (or missing) is compared as before: an
unknown queue is never taken for an empty one.

P2C gets close to least-loaded without scanning or a global lock, and avoids herding every
request onto the one replica that looked best a moment ago (Mitzenmacher; Envoy's LEAST_REQUEST,
which weighs endpoints by their ORCA load reports the same way).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Protocol, TypeVar


class Loaded(Protocol):
    """What selection reads of a replica: its load now, what it reported, its latency."""

    @property
    def outstanding(self) -> int: ...

    @property
    def ewma_latency_s(self) -> float: ...

    @property
    def weight(self) -> float: ...

    @property
    def reported_queue(self) -> float: ...

    @property
    def load_at(self) -> float: ...


R = TypeVar("R", bound=Loaded)


class PowerOfTwoChoices:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()

    def pick(self, candidates: Sequence[R], fresh_after: float = math.inf) -> R | None:
        """One of ``candidates``; their reported queues count where both readings of the
        pair were taken at ``fresh_after`` or later (default: never, as without reports)."""
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
        if first.load_at >= fresh_after and second.load_at >= fresh_after:
            a = (first.reported_queue + first.outstanding + 1) / first.weight
            b = (second.reported_queue + second.outstanding + 1) / second.weight
            if a != b:
                return first if a < b else second
            return first if first.ewma_latency_s <= second.ewma_latency_s else second
        return min(first, second, key=_load)


def _load(replica: Loaded) -> tuple[float, float]:
    return ((replica.outstanding + 1) / replica.weight, replica.ewma_latency_s)

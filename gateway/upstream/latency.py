"""A pool's recent latency distribution, for hedging after the observed p95.

A fixed ring of the last ``size`` successful attempt latencies; the quantile is recomputed every
``refresh_every`` samples, so the request path pays an append, not a sort. Bounded by count:
``size`` floats, and a sorted copy of at most as many, however many latencies were recorded.
"""

from __future__ import annotations


class LatencyWindow:
    def __init__(self, size: int = 512, refresh_every: int = 64) -> None:
        self._samples = [0.0] * size
        self._size = size
        self._count = 0
        self._refresh_every = refresh_every
        self._sorted: list[float] = []

    @property
    def count(self) -> int:
        return self._count

    def record(self, latency_s: float) -> None:
        self._samples[self._count % self._size] = latency_s
        self._count += 1
        if self._count % self._refresh_every == 0 or self._count < self._refresh_every:
            self._sorted = sorted(self._samples[: min(self._count, self._size)])

    def quantile(self, q: float) -> float | None:
        if not self._sorted:
            return None
        index = min(len(self._sorted) - 1, int(q * len(self._sorted)))
        return self._sorted[index]

"""Per-second and per-phase statistics of a run, from its request events.

Every request counts in the second it started (as bench_faults does), so a request held by a
hung replica shows up where it was sent, with its full latency. Rates: failed and late over
all requests; degraded and wrong over the valid answers (a failed request has no answer).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from loadtests.chaos.events import Event

WARMUP_S = 1.0


@dataclass(frozen=True, slots=True)
class Window:
    """A span of the run in seconds since time zero, e.g. a fault window."""

    start: float
    end: float
    label: str = ""


def quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank quantile of sorted values; NaN for none."""
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


@dataclass(frozen=True, slots=True)
class Totals:
    """Counts and latency quantiles of the requests sent during ``seconds``."""

    seconds: float
    sent: int = 0
    failed: int = 0
    late: int = 0
    degraded: int = 0
    wrong: int = 0
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan

    @property
    def answered(self) -> int:
        return self.sent - self.failed

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds > 0 else 0.0

    @property
    def failed_rate(self) -> float:
        return _share(self.failed, self.sent)

    @property
    def degraded_rate(self) -> float:
        return _share(self.degraded, self.answered)

    @property
    def wrong_rate(self) -> float:
        return _share(self.wrong, self.answered)


def totals(events: Iterable[Event], seconds: float, deadline_ms: float) -> Totals:
    picked = list(events)
    latencies = sorted(e.ms for e in picked)
    return Totals(
        seconds=seconds,
        sent=len(picked),
        failed=sum(1 for e in picked if not e.ok),
        late=sum(1 for e in picked if e.ms > deadline_ms),
        degraded=sum(1 for e in picked if e.ok and e.degraded),
        wrong=sum(1 for e in picked if e.ok and e.wrong),
        p50_ms=quantile(latencies, 0.50),
        p99_ms=quantile(latencies, 0.99),
        max_ms=latencies[-1] if latencies else math.nan,
    )


@dataclass(frozen=True, slots=True)
class Run:
    """The events of one run on its own time axis: ``t0`` is time zero (the first request)."""

    events: tuple[Event, ...]
    t0: float
    deadline_ms: float

    @classmethod
    def of(cls, events: Iterable[Event], deadline_ms: float, t0: float | None = None) -> Run:
        ordered = tuple(sorted(events, key=lambda e: e.t))
        start = t0 if t0 is not None else (ordered[0].t if ordered else 0.0)
        return cls(ordered, start, deadline_ms)

    @property
    def duration_s(self) -> float:
        """Seconds from time zero to the start of the last request."""
        return max(0.0, self.events[-1].t - self.t0) if self.events else 0.0

    def between(self, start: float, end: float) -> Totals:
        """Totals of the requests started in [start, end) seconds since time zero."""
        lo, hi = self.t0 + start, self.t0 + end
        picked = (e for e in self.events if lo <= e.t < hi)
        return totals(picked, end - start, self.deadline_ms)

    def overall(self) -> Totals:
        return totals(self.events, max(self.duration_s, 1e-9), self.deadline_ms)

    def per_second(self) -> list[Totals]:
        """One `Totals` per second since time zero; a last second less than half run is left
        out (a few stragglers as Locust stops would read as a throughput collapse)."""
        whole, part = divmod(self.duration_s, 1.0)
        buckets: list[list[Event]] = [[] for _ in range(int(whole) + (part >= 0.5))]
        for event in self.events:
            index = math.floor(event.t - self.t0)
            if 0 <= index < len(buckets):
                buckets[index].append(event)
        return [totals(b, 1.0, self.deadline_ms) for b in buckets] if self.events else []

    def phases(self, windows: Sequence[Window]) -> dict[str, Totals]:
        """before the first window (after a warm-up), during (first start to last end), after.

        The first second (connections opening, users starting) is left out of "before", so
        it is a fair baseline; `overall` and the objective still count every request.
        """
        end = self.duration_s + 1e-6  # the last request belongs to the last phase
        first = min((w.start for w in windows), default=end)
        last = max((w.end for w in windows), default=end)
        return {
            "before": self.between(min(WARMUP_S, first / 2), first),
            "during": self.between(first, last),
            "after": self.between(last, max(last, end)),
        }


def tally(
    events: Iterable[Event], key: Callable[[Event], str], where: Callable[[Event], bool]
) -> Counter[str]:
    """How many of the events ``where`` picks fall under each non-empty ``key``."""
    return Counter(k for e in events if where(e) and (k := key(e)))

"""The buffers of the dashboard's history: one second's answers per model, rows of samples, and
an event log.

Metrics are for Prometheus, which keeps history elsewhere; a gateway on its own keeps none, so
for its dashboard these small bounded structures keep the last minutes in-process:
`SecondCounts` sums one second of the edge's answers (a log-bucket latency sketch, so p50/p99
cost one dict update per answer), `SampleRing` keeps one row per second, `EventLog` the last
few hundred state changes with their wall-clock time. No clock here: the recorder
(`gateway.control.history`) reads its injected clock and passes times in.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# answers faster than this share the first bucket
SKETCH_FLOOR_S = 1e-5
# answers slower than an hour share the last bucket
SKETCH_CEILING_S = 3600.0
# each bucket 5 % wider than the previous: quantiles within ±2.5 %
SKETCH_GROWTH = 1.05
_LOG_GROWTH = math.log(SKETCH_GROWTH)
LEVELS = ("info", "ok", "warn", "bad")
MAX_SKETCH_BUCKETS = int(math.log(SKETCH_CEILING_S / SKETCH_FLOOR_S) / _LOG_GROWTH) + 2


class LatencySketch:
    """A log-bucketed latency histogram: constant work per answer, quantiles within ±2.5 %.

    Bounded by count: at most `MAX_SKETCH_BUCKETS` buckets, whatever the latencies (those
    under `SKETCH_FLOOR_S` share the first, those over `SKETCH_CEILING_S` the last).
    """

    __slots__ = ("_buckets", "count")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self.count = 0

    def add(self, latency_s: float) -> None:
        self.add_all((latency_s,))

    def add_all(self, latencies_s: Iterable[float]) -> None:
        buckets, log, floor, ceiling = self._buckets, math.log, SKETCH_FLOOR_S, SKETCH_CEILING_S
        for latency_s in latencies_s:
            index = 0
            if latency_s > floor:
                index = int(log(min(latency_s, ceiling) / floor) / _LOG_GROWTH) + 1
            buckets[index] = buckets.get(index, 0) + 1
            self.count += 1

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile in seconds (the geometric middle of its bucket); None if empty."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self._buckets):
            seen += self._buckets[index]
            if seen >= rank:
                return float(SKETCH_FLOOR_S * SKETCH_GROWTH ** max(0.0, index - 0.5))
        raise AssertionError("unreachable: the ranks add up to count")


@dataclass(slots=True)
class SecondCounts:
    """One model's answers since the last sample, as its clients saw them."""

    answers: int = 0
    # 5xx: the gateway could not answer (4xx are the client's own)
    errors: int = 0
    # 200s served degraded (a fallback, a vote short of quorum...)
    degraded: int = 0
    # fallback answers by reason
    fallback: Counter[str] = field(default_factory=Counter)
    latency: LatencySketch = field(default_factory=LatencySketch)

    def add_all(
        self, status: int, latencies_s: Sequence[float], degraded: str | None, fallback: bool
    ) -> None:
        """Answers alike in all but their latency."""
        n = len(latencies_s)
        self.answers += n
        if status >= 500:
            self.errors += n
        elif degraded is not None:
            self.degraded += n
            if fallback:
                self.fallback[degraded] += n
        self.latency.add_all(latencies_s)

    def row(self, elapsed_s: float) -> dict[str, float | None]:
        """Rate per second over ``elapsed_s``, shares of all answers, p50/p99 in ms."""
        n = self.answers
        p50, p99 = self.latency.quantile(0.5), self.latency.quantile(0.99)
        return {
            "rate": round(n / elapsed_s, 3) if elapsed_s > 0 else 0.0,
            "error_share": round(self.errors / n, 4) if n else None,
            "degraded_share": round(self.degraded / n, 4) if n else None,
            "fallback_share": round(sum(self.fallback.values()) / n, 4) if n else None,
            "p50_ms": None if p50 is None else round(p50 * 1000, 3),
            "p99_ms": None if p99 is None else round(p99 * 1000, 3),
        }


Row = dict[str, Any]


class SampleRing:
    """The last ``capacity`` sample rows (each with its wall time ``t``), oldest first.

    Bounded by count: never more than ``capacity`` rows; the oldest go first, a reload's
    `take_from` included.
    """

    def __init__(self, capacity: int) -> None:
        self._rows: deque[Row] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def capacity(self) -> int:
        return self._rows.maxlen or 0

    def __iter__(self) -> Iterator[Row]:
        return iter(self._rows)

    def append(self, row: Row) -> None:
        self._rows.append(row)

    def take_from(self, other: SampleRing) -> None:
        """Keeps ``other``'s rows before any of its own (a reload's new recorder)."""
        mine = list(self._rows)
        self._rows.clear()
        self._rows.extend([*other._rows, *mine])

    def since(self, wall: float) -> list[Row]:
        return [row for row in self._rows if row["t"] >= wall]


@dataclass(frozen=True, slots=True)
class Event:
    """One state change: when (wall seconds), what kind, of whom, what, how bad."""

    t: float
    kind: str
    subject: str
    detail: str
    # one of LEVELS: the colour the dashboard gives it
    level: str = "info"
    # who acted (an operator's name), for an audited action
    by: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "t": round(self.t, 3),
            "kind": self.kind,
            "subject": self.subject,
            "detail": self.detail,
            "level": self.level,
        }
        if self.by is not None:
            doc["by"] = self.by
        return doc


class EventLog:
    """The last ``capacity`` events, and how many of each kind were ever recorded.

    Bounded by count: never more than ``capacity`` events (the oldest go first); ``counts``
    has one entry per event kind, a fixed vocabulary of the code, not of the traffic.
    """

    def __init__(self, capacity: int) -> None:
        self._events: deque[Event] = deque(maxlen=capacity)
        self.counts: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._events)

    def record(self, event: Event) -> None:
        if event.level not in LEVELS:
            raise ValueError(f"event level {event.level!r} is not one of {LEVELS}")
        self._events.append(event)
        self.counts[event.kind] += 1

    def take_from(self, other: EventLog) -> None:
        """Keeps ``other``'s events and counts before its own (a reload's new recorder)."""
        mine = list(self._events)
        self._events.clear()
        self._events.extend([*other._events, *mine])
        self.counts = other.counts + self.counts

    def newest_first(self, limit: int | None = None) -> list[Event]:
        events = list(reversed(self._events))
        return events if limit is None else events[:limit]

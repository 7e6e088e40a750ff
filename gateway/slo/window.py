"""Good/total/degraded event counters in time buckets, for SLO windows up to a compliance window.

Two resolutions keep memory bounded and short windows sharp: fine buckets (10 s) for windows up
to an hour, coarse buckets (5 min) for everything longer, so a 30 d window holds ~8,600 coarse
plus ~360 fine buckets per SLO. Buckets are keyed by *wall* time (Unix seconds, from the
injected `Clock`) so that several gateway instances agree on them: each instance exports its
local deltas per bucket and receives the other instances' totals per bucket, and a window's
count is local plus remote. A window covers the whole buckets that start inside it, so it
never counts an event older than the window (it may miss up to one bucket of the oldest ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gateway.clock import Clock

FINE_S = 10
COARSE_S = 300
FINE_HORIZON_S = 3600.0  # windows up to this long are counted in fine buckets
EXPIRY_MARGIN_S = 120.0  # shared counters outlive the last window that reads them by this

Tag = Literal["f", "c"]
Field = Literal["g", "t", "d"]  # good, total, degraded


@dataclass(slots=True)
class Counts:
    good: int = 0
    total: int = 0
    degraded: int = 0

    @property
    def bad(self) -> int:
        return self.total - self.good

    def add(self, other: Counts) -> None:
        self.good += other.good
        self.total += other.total
        self.degraded += other.degraded

    def minus(self, other: Counts) -> Counts:
        return Counts(
            self.good - other.good, self.total - other.total, self.degraded - other.degraded
        )

    def copy(self) -> Counts:
        return Counts(self.good, self.total, self.degraded)

    def set(self, field: Field, value: int) -> None:
        if field == "g":
            self.good = value
        elif field == "t":
            self.total = value
        else:
            self.degraded = value


@dataclass(frozen=True, slots=True)
class BucketDelta:
    """Local events of one bucket not exported yet; ``expire_at`` is when sharing can stop."""

    tag: Tag
    start: int
    counts: Counts
    expire_at: float


class _Series:
    """Buckets of one width: local counts, other instances' counts and what was exported."""

    def __init__(self, tag: Tag, step: int, horizon_s: float) -> None:
        self.tag, self.step, self.horizon_s = tag, step, horizon_s
        self.local: dict[int, Counts] = {}
        self.remote: dict[int, Counts] = {}
        self._exported: dict[int, Counts] = {}
        self._dirty: set[int] = set()
        self._current = -1
        self._pruned_for = -1
        # window -> (current bucket start, version, sum of the buckets before it): a window's
        # closed buckets are summed once per bucket width, unless one of them changes
        self._closed: dict[float, tuple[int, int, Counts]] = {}
        self._version = 0
        self._newest = -1

    def start_of(self, wall: float) -> int:
        return int(wall // self.step) * self.step

    def add(self, wall: float, good: bool, degraded: bool) -> None:
        start = self.start_of(wall)
        if start != self._current:
            self._current = start
            self._dirty.add(start)
            self._prune(wall)
            if start < self._newest:
                self._version += 1  # the wall clock went back: a closed bucket changes
        counts = self.local.get(start)
        if counts is None:
            counts = self.local[start] = Counts()
        counts.total += 1
        counts.good += good
        counts.degraded += degraded

    def sum(self, wall: float, window_s: float) -> Counts:
        """Counts of the buckets that start in ``(wall - window_s, wall]``."""
        last = self.start_of(wall)
        self._newest = max(self._newest, last)
        cached = self._closed.get(window_s)
        if cached is not None and cached[0] == last and cached[1] == self._version:
            closed = cached[2]
        else:
            closed = Counts()
            first = self.start_of(wall - window_s) + self.step
            for start in range(first, last, self.step):
                for book in (self.local, self.remote):
                    counts = book.get(start)
                    if counts is not None:
                        closed.add(counts)
            self._closed[window_s] = (last, self._version, closed)
        result = closed.copy()
        for book in (self.local, self.remote):
            counts = book.get(last)
            if counts is not None:
                result.add(counts)
        return result

    def take_deltas(self) -> list[BucketDelta]:
        deltas: list[BucketDelta] = []
        for start in sorted(self._dirty):
            local = self.local.get(start)
            if local is None:
                continue
            sent = self._exported.get(start, Counts())
            delta = local.minus(sent)
            if delta.total or delta.good or delta.degraded:
                expire_at = start + self.step + self.horizon_s + EXPIRY_MARGIN_S
                deltas.append(BucketDelta(self.tag, start, delta, expire_at))
            self._exported[start] = local.copy()
        self._dirty = {self._current} if self._current in self.local else set()
        return deltas

    def set_remote(self, wall: float, start: int, field: Field, value: int) -> None:
        self._prune(wall)
        if start + self.step + self.horizon_s <= wall:
            return  # too old to be counted by any window
        if start < self.start_of(wall):
            self._version += 1  # a closed bucket changed: cached sums are stale
        counts = self.remote.get(start)
        if counts is None:
            counts = self.remote[start] = Counts()
        counts.set(field, max(0, value))

    def clear_remote(self) -> None:
        self.remote.clear()
        self._version += 1

    def _prune(self, wall: float) -> None:
        """Drops buckets no window can reach; runs once per bucket width at most."""
        now_start = self.start_of(wall)
        if now_start == self._pruned_for:
            return
        self._pruned_for = now_start
        oldest = now_start - math.ceil(self.horizon_s / self.step) * self.step
        for book in (self.local, self.remote, self._exported):
            # buckets arrive about in time order: drop the expired prefix (one that
            # arrived late goes when the ones before it do, so memory stays bounded)
            while book:
                first = next(iter(book))
                if first >= oldest:
                    break
                del book[first]
        if len(self._dirty) > 2 * self.horizon_s / self.step:  # nobody takes deltas: trim
            self._dirty = {s for s in self._dirty if s >= oldest}


class SloWindow:
    """Counters for one SLO, from 5-minute burn windows up to ``retention_s`` (≥ 30 d)."""

    def __init__(self, clock: Clock, retention_s: float) -> None:
        self._clock = clock
        self.retention_s = retention_s
        self._fine = _Series("f", FINE_S, FINE_HORIZON_S + FINE_S)
        self._coarse = _Series("c", COARSE_S, retention_s + COARSE_S)
        self._series = {"f": self._fine, "c": self._coarse}

    def keep_for(self, retention_s: float) -> None:
        """Changes how long coarse buckets are kept (a reload changed the window)."""
        self.retention_s = retention_s
        self._coarse.horizon_s = retention_s + COARSE_S

    def add(self, good: bool, degraded: bool = False, wall: float | None = None) -> None:
        """One event, in the buckets of ``wall`` (None: now)."""
        if wall is None:
            wall = self._clock.wall()
        self._fine.add(wall, good, degraded)
        self._coarse.add(wall, good, degraded)

    def counts(self, window_s: float) -> Counts:
        """Events of all instances in the last ``window_s`` (fine buckets up to an hour)."""
        series = self._fine if window_s <= FINE_HORIZON_S else self._coarse
        return series.sum(self._clock.wall(), window_s)

    def take_deltas(self) -> list[BucketDelta]:
        """Local events since the previous call, per bucket, to push to the shared store."""
        return self._fine.take_deltas() + self._coarse.take_deltas()

    def set_remote(self, tag: str, start: int, field: Field, value: int) -> None:
        """The other instances' total for one bucket and field (replaces the previous one)."""
        series = self._series.get(tag)
        if series is not None and start % series.step == 0:
            series.set_remote(self._clock.wall(), start, field, value)

    def clear_remote(self) -> None:
        self._fine.clear_remote()
        self._coarse.clear_remote()

    def bucket_count(self) -> int:
        """Buckets held in memory (local and remote), for tests and `/slo`."""
        return sum(len(s.local) + len(s.remote) for s in self._series.values())

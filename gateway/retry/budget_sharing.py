"""The retry budget's counters shared between gateway instances (through the state store).

Each instance keeps its own budget on its monotonic clock; for sharing, it also counts its
requests and retries per *wall-clock* second, exports them as counter deltas, and takes the
other instances' totals back, so every instance's budget sees the traffic of all: a pool that
fails for everyone gets at most ``ratio`` of *everyone's* requests as retries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from gateway.clock import Clock
from gateway.state.base import CounterDelta

KEY_PREFIX = "budget:"
FIELDS = ("req", "retry")
# how long a shared counter outlives its window
KEEP_S = 60.0


class SharedBudgetCounts:
    def __init__(self, clock: Clock, window_s: int) -> None:
        self._clock = clock
        self._window_s = window_s
        self._pending: dict[tuple[int, str], int] = defaultdict(int)
        self._remote: dict[tuple[int, str], int] = {}

    def count(self, field: str) -> None:
        self._pending[(int(self._clock.wall()), field)] += 1

    def export_deltas(self) -> dict[str, CounterDelta]:
        out = {
            f"{KEY_PREFIX}{second}:{field}": CounterDelta(n, second + self._window_s + KEEP_S)
            for (second, field), n in self._pending.items()
        }
        self._pending.clear()
        return out

    def apply_remote(self, counters: Mapping[str, int], full: bool = False) -> None:
        """Other instances' totals per key (``full``: the map holds all of them)."""
        if full:
            self._remote.clear()
        oldest = int(self._clock.wall()) - self._window_s - 1
        for key, value in counters.items():
            if not key.startswith(KEY_PREFIX):
                continue
            second, _, field = key[len(KEY_PREFIX) :].partition(":")
            if field in FIELDS and second.lstrip("-").isdigit() and int(second) >= oldest:
                self._remote[(int(second), field)] = value
        for stale in [k for k in self._remote if k[0] < oldest]:
            del self._remote[stale]

    def remote_window(self) -> tuple[int, int]:
        """(requests, retries) of the other instances in the budget's window."""
        oldest = int(self._clock.wall()) - self._window_s + 1
        requests = retries = 0
        for (second, field), value in self._remote.items():
            if second >= oldest:
                if field == "req":
                    requests += value
                else:
                    retries += value
        return requests, retries

"""Whether a worker's view of the fleet is fresh: heard from control within ``stale_s``.

Control sends a snapshot at least once a second (`gateway.snapshot.publisher`), so a worker
that heard nothing for longer than a few of those knows control is hung or gone: it keeps
serving on its last snapshot and says that snapshot is stale.
"""

from __future__ import annotations

from typing import Final

from gateway.clock import Clock

STALE_S: Final = 3.0


class Freshness:
    __slots__ = ("_clock", "heard_at", "stale_s")

    def __init__(self, clock: Clock, stale_s: float = STALE_S) -> None:
        self._clock = clock
        self.stale_s = stale_s
        # the clock's time of the last message (None: none)
        self.heard_at: float | None = None

    def heard(self) -> None:
        self.heard_at = self._clock.now()

    @property
    def stale(self) -> bool:
        """True until the first message, and once none came for more than ``stale_s``."""
        heard_at = self.heard_at
        return heard_at is None or self._clock.now() - heard_at > self.stale_s

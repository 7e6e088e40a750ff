"""`Rejects`: the values read back from a store or the decisions file that failed their bounds.

A value that fails (`gateway.state.limits`) is dropped where it is read, never applied and
never offered back to the store; the sync goes on with the rest. Each drop is counted by
source and kind (``gateway_state_rejected_total``) and logged once per key, so a forged value
that sits in the store is one warning, not one per pull.
"""

from __future__ import annotations

import logging
from collections import Counter

log = logging.getLogger(__name__)

# keys remembered as logged; beyond it, drops are counted silently
MAX_LOGGED_KEYS = 10_000
MAX_WHY_CHARS = 200

# kinds: signal | counter | decision | heartbeat | key (a key of the wrong type, deleted) |
# seq (a corrupt change sequence, repaired) | oversized (a value the script would not return) |
# progress (a rollout's progress refused) | capped (an ejection or drain over the pool's cap)
KINDS = (
    "signal",
    "counter",
    "decision",
    "heartbeat",
    "key",
    "seq",
    "oversized",
    "progress",
    "capped",
)


class Rejects:
    def __init__(self) -> None:
        # (source, kind) -> values dropped
        self.counts: Counter[tuple[str, str]] = Counter()
        self._logged: set[tuple[str, str]] = set()

    def drop(self, source: str, kind: str, key: str, why: str) -> None:
        """One value from ``source`` (redis | decisions_file | store) dropped."""
        self.counts[(source, kind)] += 1
        seen = (kind, key[:MAX_WHY_CHARS])
        if seen in self._logged or len(self._logged) >= MAX_LOGGED_KEYS:
            return
        self._logged.add(seen)
        log.warning(
            "shared state: %s %s %r dropped (%s); the rest goes on",
            source,
            kind,
            key[:MAX_WHY_CHARS],
            why[:MAX_WHY_CHARS],
        )

    def total(self) -> int:
        return sum(self.counts.values())

    def snapshot(self) -> dict[str, int]:
        return {f"{source}/{kind}": n for (source, kind), n in sorted(self.counts.items())}

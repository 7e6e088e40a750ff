"""A rollout's evidence pooled over a fleet: each gateway's counts shared as counters.

Every gateway of a fleet sees its own requests; the deciding one (the lease holder) judges a
step on all of them. Counts (comparisons, agreements, disagreements by output, the candidate's
requests and errors, failed copies) leave as deltas with the shared-state sync, under a key
naming the step (model, declaration, step, and when the step began), and come back as the
other instances' totals. Latencies stay local (a percentile does not add up).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping

from gateway.rollout.evidence import RolloutEvidence
from gateway.state.base import CounterDelta

PREFIX = "ro:"
# a step's counts outlive any step's hold
TTL_S = 7 * 86_400.0
COUNTS = ("compared", "agreed", "candidate_requests", "candidate_errors", "compare_errors")
DISAGREE = "dis:"


def step_key(model: str, declared: str, step: int, since: float) -> str:
    return f"{PREFIX}{model}:{declared}:{step}:{int(since * 1000)}"


class EvidencePool:
    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self._unsent: Counter[str] = Counter()
        self._remote: dict[str, int] = {}

    def add(self, step: str, name: str, amount: int = 1) -> None:
        if amount:
            self._unsent[f"{step}|{name}"] += amount

    def export_deltas(self) -> dict[str, CounterDelta]:
        expire = self._wall() + TTL_S
        deltas = {key: CounterDelta(n, expire) for key, n in self._unsent.items()}
        self._unsent.clear()
        return deltas

    def apply_remote(self, counters: Mapping[str, int], full: bool) -> None:
        """The other instances' totals (changed keys; all of them when ``full``)."""
        if full:
            self._remote = {}
        self._remote.update({k: v for k, v in counters.items() if k.startswith(PREFIX)})

    def pooled(self, step: str, own: RolloutEvidence) -> RolloutEvidence:
        """``own`` plus what the other instances counted for the same step."""
        prefix = f"{step}|"
        theirs = {k[len(prefix) :]: v for k, v in self._remote.items() if k.startswith(prefix)}
        if not theirs:
            return own
        total = dataclasses.replace(own, disagreements=Counter(own.disagreements))
        for name in COUNTS:
            setattr(total, name, getattr(own, name) + theirs.get(name, 0))
        for name, count in theirs.items():
            if name.startswith(DISAGREE):
                total.disagreements[name[len(DISAGREE) :]] += count
        return total

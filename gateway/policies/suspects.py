"""Suspects: replicas whose answers keep disagreeing with the vote's quorum.

Diverse model versions disagree now and then by design (on the digits test split too: the
shares are on docs/measured.md), so a count of dissents alone would quarantine honest replicas
on a long enough run. A replica becomes a suspect on its *share* of dissenting rows over its
last ``window`` voted rows, once it has at least ``min_votes`` of them: a corrupting replica
stands out by its share, an honest one's occasional dissent does not. Rows, not requests, are
counted: an honest replica disagrees on some row of a many-row batch far more often than on
any one row.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol


class SuspectRule(Protocol):
    """What judges a model's suspects (a vote's config, an audit's): the rows kept per replica,
    the rows seen before one is judged, the share that makes a suspect, its quarantine."""

    @property
    def suspect_window(self) -> int: ...

    @property
    def suspect_min_votes(self) -> int: ...

    @property
    def suspect_ratio(self) -> float: ...

    @property
    def quarantine_s(self) -> float: ...


@dataclass(slots=True)
class _Record:
    votes: deque[bool]
    dissents: int = 0
    total_dissents: int = 0
    total_votes: int = 0


@dataclass
class SuspectTracker:
    window: int
    min_votes: int
    ratio: float
    _records: dict[str, _Record] = field(default_factory=dict)

    def observe(self, replica_id: str, rows: int, dissented_rows: int) -> bool:
        """Records one vote of ``rows`` rows; True when the replica crosses the threshold."""
        record = self._records.get(replica_id)
        if record is None:
            record = self._records[replica_id] = _Record(deque(maxlen=self.window))
        for row in range(rows):
            dissented = row < dissented_rows
            if len(record.votes) == self.window and record.votes[0]:
                record.dissents -= 1
            record.votes.append(dissented)
            record.dissents += dissented
        record.total_votes += rows
        record.total_dissents += dissented_rows
        if len(record.votes) < self.min_votes:
            return False
        return record.dissents / len(record.votes) >= self.ratio

    def forgive(self, replica_id: str) -> None:
        """Starts the replica afresh (after its quarantine)."""
        self._records.pop(replica_id, None)

    def snapshot(self) -> dict[str, dict[str, float]]:
        return {
            rid: {
                "votes": r.total_votes,
                "dissents": r.total_dissents,
                "recent_dissent_ratio": round(r.dissents / len(r.votes), 4) if r.votes else 0.0,
            }
            for rid, r in self._records.items()
        }

"""Vote dissents and audit verdicts judged into suspects, and a suspect quarantined.

The vote route reports each replica's dissent from a quorum (`observe`: rows voted, rows it
dissented on), and an audit each replica it judged (`gateway.pipeline.audit`: rows compared,
rows the third opinion found it wrong on, ``by="audit"``); per model a `SuspectTracker` keeps
the share of its recent rows found against the others, and a replica over the model's
threshold is quarantined through the registry, then starts afresh. Where it runs decides
whose votes it sees: in one process every vote; with data-plane workers, the control process
receives every worker's dissents and audits (`gateway.worker.shipped`), so a replica's record
spans all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.upstream.registry import Registry
from gateway.voting.suspects import SuspectRule, SuspectTracker

REASONS = {
    "vote": ("dissented from the {model} quorum too often", "vote_dissent"),
    "audit": ("found wrong by {model}'s audits too often", "audit"),
}


class DissentSink(Protocol):
    """Where a vote's dissents go (`Suspects` here; shipped to control in a worker)."""

    def observe(
        self,
        model: str,
        config: SuspectRule,
        replica_id: str,
        rows: int,
        dissented: int,
        by: str = "vote",
    ) -> None: ...

    def forget_replica(self, replica_id: str) -> None: ...

    def to_json(self) -> dict[str, dict[str, dict[str, float]]]: ...


# (model, replica id, rows, rows found wrong, by): each verdict, as it is recorded
Heard = Callable[[str, str, int, int, str], None]


class Suspects:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.trackers: dict[str, SuspectTracker] = {}
        # told each verdict (the burn policy's vote's evidence)
        self.heard: Heard | None = None

    def observe(
        self,
        model: str,
        config: SuspectRule,
        replica_id: str,
        rows: int,
        dissented: int,
        by: str = "vote",
    ) -> None:
        """One vote's (or audit's, ``by``) verdict on ``replica_id``: ``dissented`` of its
        ``rows`` rows."""
        if self.heard is not None:
            self.heard(model, replica_id, rows, dissented, by)
        tracker = self.trackers.get(model)
        if tracker is None:
            tracker = SuspectTracker(
                config.suspect_window, config.suspect_min_votes, config.suspect_ratio
            )
            self.trackers[model] = tracker
        if not tracker.observe(replica_id, rows, dissented):
            return
        replica = self._registry.replica(replica_id)
        reason, kind = REASONS[by]
        if replica is not None and self._registry.quarantine(
            replica, config.quarantine_s, reason.format(model=model), kind
        ):
            tracker.forgive(replica_id)

    def forget_replica(self, replica_id: str) -> None:
        """The replica left the gateway: its vote record goes too (DNS churn)."""
        for tracker in self.trackers.values():
            tracker.forgive(replica_id)

    def to_json(self) -> dict[str, dict[str, dict[str, float]]]:
        return {model: tracker.snapshot() for model, tracker in self.trackers.items()}

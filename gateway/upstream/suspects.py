"""Vote dissents judged into suspects, and a suspect quarantined: the registry's side of a vote.

The vote route reports each replica's dissent from a quorum (`observe`: rows voted, rows it
dissented on); per model a `SuspectTracker` keeps the share of its recent rows it dissented on,
and a replica over the model's threshold is quarantined through the registry, then starts
afresh. Where it runs decides whose votes it sees: in one process every vote; with data-plane
workers, the control process receives every worker's dissents (`gateway.worker.shipped`), so a
replica's record spans all of them.
"""

from __future__ import annotations

from typing import Protocol

from gateway.config.policies import VoteConfig
from gateway.policies.suspects import SuspectTracker
from gateway.upstream.registry import Registry


class DissentSink(Protocol):
    """Where a vote's dissents go (`Suspects` here; shipped to control in a worker)."""

    def observe(
        self, model: str, config: VoteConfig, replica_id: str, rows: int, dissented: int
    ) -> None: ...

    def forget_replica(self, replica_id: str) -> None: ...

    def to_json(self) -> dict[str, dict[str, dict[str, float]]]: ...


class Suspects:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self.trackers: dict[str, SuspectTracker] = {}

    def observe(
        self, model: str, config: VoteConfig, replica_id: str, rows: int, dissented: int
    ) -> None:
        """One vote's verdict on ``replica_id``: ``dissented`` of its ``rows`` rows."""
        tracker = self.trackers.get(model)
        if tracker is None:
            tracker = SuspectTracker(
                config.suspect_window, config.suspect_min_votes, config.suspect_ratio
            )
            self.trackers[model] = tracker
        if not tracker.observe(replica_id, rows, dissented):
            return
        replica = self._registry.replica(replica_id)
        reason = f"dissented from the {model} quorum too often"
        if replica is not None and self._registry.quarantine(
            replica, config.quarantine_s, reason, "vote_dissent"
        ):
            tracker.forgive(replica_id)

    def forget_replica(self, replica_id: str) -> None:
        """The replica left the gateway: its vote record goes too (DNS churn)."""
        for tracker in self.trackers.values():
            tracker.forgive(replica_id)

    def to_json(self) -> dict[str, dict[str, dict[str, float]]]:
        return {model: tracker.snapshot() for model, tracker in self.trackers.items()}

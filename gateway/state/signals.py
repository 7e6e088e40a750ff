"""`SignalLedger`: the latest known breaker/ejection signal per replica, local or remote.

It gives each local transition the next epoch (one more than the highest seen for that replica,
a Lamport counter), queues it for `StateSync` to push, and from each pull picks the remote
signals newer than anything known here, which the caller then applies to its breakers and
ejections (including a previous run's under the same instance name, after a restart).
Applying a remote signal must not be reported back as a local transition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.clock import Clock
from gateway.state.base import BREAKER_STATES, ReplicaSignal


class SignalLedger:
    def __init__(self, origin: str, clock: Clock) -> None:
        self.origin = origin
        self._clock = clock
        self._known: dict[str, ReplicaSignal] = {}
        self._unsent: dict[str, ReplicaSignal] = {}

    def local(
        self, replica_id: str, breaker: str, ejected_until_wall: float = 0.0
    ) -> ReplicaSignal:
        """Records a transition decided here; ``ejected_until_wall`` in Unix seconds."""
        if breaker not in BREAKER_STATES:
            raise ValueError(f"unknown breaker state {breaker!r}")
        known = self._known.get(replica_id)
        signal = ReplicaSignal(
            replica_id,
            breaker,
            ejected_until_wall,
            (known.epoch if known is not None else 0) + 1,
            self.origin,
            self._clock.wall(),
        )
        self._known[replica_id] = self._unsent[replica_id] = signal
        return signal

    def take_unsent(self) -> list[ReplicaSignal]:
        """Local signals not handed to the sync yet (for its ``collect`` callback)."""
        unsent, self._unsent = list(self._unsent.values()), {}
        return unsent

    def observe(self, signals: Mapping[str, ReplicaSignal]) -> list[ReplicaSignal]:
        """The signals from elsewhere that supersede what is known here, to apply."""
        fresh = []
        for signal in signals.values():
            rid = signal.replica_id
            if not signal.supersedes(self._known.get(rid)):
                continue  # this run's own signals are known already, so never applied back
            self._known[rid] = signal
            pending = self._unsent.get(rid)
            if pending is not None and signal.supersedes(pending):
                del self._unsent[rid]  # the store would refuse it as stale anyway
            fresh.append(signal)
        return fresh

    def latest(self, replica_id: str) -> ReplicaSignal | None:
        return self._known.get(replica_id)

    def snapshot(self) -> dict[str, Any]:
        return {
            rid: {
                "breaker": s.breaker,
                "ejected_until_wall": s.ejected_until_wall,
                "epoch": s.epoch,
                "origin": s.origin,
                "local": s.origin == self.origin,
            }
            for rid, s in sorted(self._known.items())
        }

"""`SignalBook`: the latest known breaker/ejection signal per replica, local or remote.

It gives each local transition the next epoch (one more than the highest seen for that replica,
a Lamport counter), queues it for `StateSync` to push, and from each pull picks the remote
signals newer than anything known here, which the caller then applies to its breakers and
ejections (including a previous run's under the same instance name, after a restart).
Applying a remote signal must not be reported back as a local transition.

Signals expire (`SIGNAL_TTL_S`), so that replicas long gone (every rollout under DNS discovery
leaves some) do not stay here, nor in ``/admin/state``. An expired signal is never applied nor
announced, but is kept while the store still holds it: its epoch still orders, so that this
instance's next transition for the replica outranks it instead of being refused as stale. Once
expired and no longer in the store (or never pushed), it is forgotten; a later transition then
starts the replica's epochs afresh, which the store accepts, since it dropped the entry too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.clock import Clock
from gateway.state.base import BREAKER_STATES, ReplicaSignal

# how often expired signals are looked for (a pass over all known ones)
FORGET_EVERY_S = 60.0


class SignalBook:
    def __init__(self, origin: str, clock: Clock) -> None:
        self.origin = origin
        self._clock = clock
        self._known: dict[str, ReplicaSignal] = {}
        self._unsent: dict[str, ReplicaSignal] = {}
        # replica ids the last pull carried
        self._stored: frozenset[str] = frozenset()
        self._forgot_at = float("-inf")

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
        """Local signals not handed to the sync yet (for its ``collect`` callback); expired
        ones are dropped (the store would drop them too)."""
        wall = self._clock.wall()
        unsent, self._unsent = self._unsent.values(), {}
        self._forget_expired(wall)
        return [s for s in unsent if s.expires_at() > wall]

    def observe(self, signals: Mapping[str, ReplicaSignal]) -> list[ReplicaSignal]:
        """The live signals from elsewhere that supersede what is known here, to apply.

        ``signals`` is everything the store holds (a pull's signals), so a known signal that
        is not in it any more and has expired can be forgotten.
        """
        wall = self._clock.wall()
        self._stored = frozenset(signals)
        fresh = []
        for signal in signals.values():
            rid = signal.replica_id
            if not signal.supersedes(self._known.get(rid)):
                # this run's own signals are known already, so never applied back
                continue
            # an expired one too: its epoch still orders
            self._known[rid] = signal
            pending = self._unsent.get(rid)
            if pending is not None and signal.supersedes(pending):
                # the store would refuse it as stale anyway
                del self._unsent[rid]
            if signal.expires_at() > wall:
                fresh.append(signal)
        self._forget_expired(wall)
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
                "expires_wall": s.expires_at(),
            }
            for rid, s in sorted(self._known.items())
        }

    def _forget_expired(self, wall: float) -> None:
        if wall - self._forgot_at < FORGET_EVERY_S:
            return
        self._forgot_at = wall
        stored = self._stored
        for rid in [r for r, s in self._known.items() if s.expires_at() <= wall]:
            if rid not in stored:
                del self._known[rid]
                self._unsent.pop(rid, None)

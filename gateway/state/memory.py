"""The in-memory `StateStore`: the embedded default for a single gateway instance.

It keeps exactly the semantics of the Redis store (epoch rule, batches applied at most once,
counter totals with expiry, signals that expire as in `redis_scripts`, a change log behind
cursors, a generation token, heartbeats kept until they expire), so `StateSync` and the
contract tests treat both the same; several syncs in one process may share one.
"""

from __future__ import annotations

import secrets
from typing import Any

from gateway.clock import Clock, MonotonicClock
from gateway.state.base import (
    START,
    Cursor,
    Pulled,
    PushBatch,
    PushResult,
    ReplicaSignal,
)
from gateway.state.decisions import Decision
from gateway.state.fleet import Heartbeat
from gateway.state.lease import Lease, MemoryLeases, refused

PRUNE_EVERY_S = 1.0


class MemoryStore:
    name = "memory"

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or MonotonicClock()
        self.generation = secrets.token_hex(8)
        self._seq = 0
        self._totals: dict[str, int] = {}
        self._expiry: dict[str, float] = {}
        # key -> seq of its last change, oldest first
        self._changed: dict[str, int] = {}
        self._signals: dict[str, ReplicaSignal] = {}
        # replica id -> when its entry expires
        self._signals_until: dict[str, float] = {}
        # origin -> highest batch number applied
        self._batches: dict[str, int] = {}
        # target -> winner; never expires
        self._decisions: dict[str, Decision] = {}
        # instance -> its newest heartbeat
        self._heartbeats: dict[str, Heartbeat] = {}
        # and their fencing tokens (`gateway.state.lease`)
        self._leases = MemoryLeases()
        self._pruned_at = float("-inf")

    @property
    def healthy(self) -> bool:
        return True

    async def push(self, batch: PushBatch) -> PushResult:
        if batch.number <= self._batches.get(batch.origin, -1):
            return PushResult(self.generation, applied=False)
        self._batches[batch.origin] = batch.number
        self._seq += 1
        for key, delta in batch.counters.items():
            self._totals[key] = self._totals.get(key, 0) + delta.amount
            self._expiry[key] = delta.expire_at
            self._changed.pop(key, None)
            self._changed[key] = self._seq
        stale = []
        wall = self._clock.wall()
        for signal in batch.signals:
            rid, expires = signal.replica_id, signal.expires_at()
            if expires <= wall:
                # offered already expired: nothing to tell
                continue
            kept = self._signals_until.get(rid, 0.0)
            current = self._signals.get(rid) if kept > wall else None
            if current is None:
                # an expired entry not pruned yet counts as absent
                kept = 0.0
            if signal.supersedes(current):
                self._signals[rid] = signal
            elif current is not None and current.order() > signal.order():
                stale.append(rid)
            # the entry outlives every signal offered for it, so none of them can come back
            self._signals_until[rid] = max(kept, expires)
        for decision in batch.decisions:
            if refused(decision.key, decision.version, self._leases.fence(decision.key)):
                # a stale lease holder's decision
                continue
            if decision.supersedes(self._decisions.get(decision.key)):
                self._decisions[decision.key] = decision
        beat = batch.heartbeat
        if (
            beat is not None
            and beat.expires_at() > wall
            and beat.newer_than(self._heartbeats.get(beat.instance), wall)
        ):
            self._heartbeats[beat.instance] = beat
        self._prune()
        return PushResult(self.generation, applied=True, stale=tuple(stale))

    async def lease(self, name: str, holder: str, ttl_s: float, release: bool = False) -> Lease:
        return self._leases.take(name, holder, ttl_s, self._clock.wall(), release)

    async def pull(self, since: Cursor = START) -> Pulled:
        self._prune()
        full = since.generation != self.generation or not 0 < since.seq <= self._seq
        after = 0 if full else since.seq
        wall = self._clock.wall()
        counters: dict[str, int] = {}
        for key, seq in reversed(self._changed.items()):
            if seq <= after:
                break
            if self._expiry[key] > wall:
                counters[key] = self._totals[key]
        signals = {r: s for r, s in self._signals.items() if self._signals_until[r] > wall}
        beats = {i: b for i, b in self._heartbeats.items() if b.expires_at() > wall}
        cursor = Cursor(self.generation, self._seq)
        return Pulled(cursor, full, signals, counters, dict(self._decisions), beats)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.name,
            "healthy": True,
            "counters": len(self._totals),
            "signals": len(self._signals),
            "decisions": len(self._decisions),
            "heartbeats": len(self._heartbeats),
        }

    async def close(self) -> None:
        return None

    def _prune(self) -> None:
        wall = self._clock.wall()
        if wall - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = wall
        for key in [k for k, at in self._expiry.items() if at <= wall]:
            del self._totals[key], self._expiry[key], self._changed[key]
        for rid in [r for r, at in self._signals_until.items() if at <= wall]:
            del self._signals[rid], self._signals_until[rid]
        for instance in [i for i, b in self._heartbeats.items() if b.expires_at() <= wall]:
            del self._heartbeats[instance]

"""Operators' decisions about replicas and pools: small values, ordered, shared, durable.

A `Decision` is the latest word on one target (``replica:<id>`` or ``pool:<name>``): drain it,
eject it until a wall time, return it to service, pause or resume a pool. Unlike a signal it
has no time to live (a manual drain holds until someone restores the replica), so it survives
in the store across reloads and restarts, and a "restore" is itself a decision (a tombstone)
that outranks the drain it ends. Order per target: ``(version, at, origin)``, compared in that
order; a new decision takes one more than the highest version known for its target, so a late
or replayed one never undoes a newer one, and every gateway picks the same winner.

`DecisionBook` keeps the winners known here, gives local decisions their version, queues them
for the sync, and from each pull picks what is new (to obey) and what the store lacks (to offer
again: a store that lost its data gets back what the fleet still obeys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

Action = Literal["drain", "eject", "restore", "pause", "resume"]
REPLICA_ACTIONS: frozenset[str] = frozenset({"drain", "eject", "restore"})
POOL_ACTIONS: frozenset[str] = frozenset({"pause", "resume"})
HOLDING: frozenset[str] = frozenset({"drain", "eject", "pause"})  # what takes a target out


def replica_key(replica_id: str) -> str:
    return f"replica:{replica_id}"


def pool_key(pool: str) -> str:
    return f"pool:{pool}"


@dataclass(frozen=True, slots=True)
class Decision:
    """What an operator (``by``) decided for ``key`` at wall time ``at``, and why."""

    key: str  # replica:<id> | pool:<name>
    action: str  # one of Action
    until: float  # wall seconds an eject ends; 0: until another decision
    by: str  # the operator's name (never a key)
    reason: str
    at: float  # wall seconds
    version: int
    origin: str  # the gateway instance that took it

    @property
    def kind(self) -> str:
        return self.key.partition(":")[0]

    @property
    def target(self) -> str:
        return self.key.partition(":")[2]

    def holds(self, wall: float) -> bool:
        """Whether it keeps its target out of service at ``wall`` (an eject ends by itself)."""
        if self.action == "eject":
            return self.until > wall
        return self.action in HOLDING

    def order(self) -> tuple[int, float, str]:
        return (self.version, self.at, self.origin)

    def supersedes(self, other: Decision | None) -> bool:
        return other is None or self.order() > other.order()

    def encode(self) -> str:
        return orjson.dumps(
            [self.key, self.action, self.until, self.by, self.reason, self.at, self.version,
             self.origin]
        ).decode()  # fmt: skip

    @classmethod
    def decode(cls, text: str | bytes) -> Decision:
        key, action, until, by, reason, at, version, origin = orjson.loads(text)
        return cls(str(key), str(action), float(until), str(by), str(reason), float(at),
                   int(version), str(origin))  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.key,
            "action": self.action,
            "until": self.until or None,
            "by": self.by,
            "reason": self.reason,
            "at": self.at,
            "version": self.version,
            "origin": self.origin,
        }


class DecisionBook:
    """The winning decision per target as known here; the queue of those to offer the store."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self._known: dict[str, Decision] = {}
        self._unsent: dict[str, Decision] = {}

    def decide(
        self,
        key: str,
        action: str,
        by: str,
        reason: str,
        at: float,
        until: float = 0.0,
        floor: int = 0,
    ) -> Decision:
        """A decision taken here: the next version for its target (at least ``floor``: a
        lease's fence, `gateway.state.lease`), known and queued at once."""
        known = self._known.get(key)
        version = max((known.version if known is not None else 0) + 1, floor)
        decision = Decision(key, action, until, by, reason, at, version, self.origin)
        self._known[key] = self._unsent[key] = decision
        return decision

    def take_unsent(self) -> list[Decision]:
        unsent, self._unsent = list(self._unsent.values()), {}
        return unsent

    def observe(self, stored: Mapping[str, Decision]) -> list[Decision]:
        """The stored decisions newer than what is known here (to obey); what the store lacks
        or holds older is queued to be offered again."""
        fresh = []
        for key, decision in stored.items():
            if decision.supersedes(self._known.get(key)):
                self._known[key] = decision
                fresh.append(decision)
                pending = self._unsent.get(key)
                if pending is not None and decision.supersedes(pending):
                    del self._unsent[key]
        for key, decision in self._known.items():
            if decision.supersedes(stored.get(key)):
                self._unsent.setdefault(key, decision)
        return fresh

    def adopt(self, decisions: Mapping[str, Decision]) -> None:
        """Takes over another book's decisions (a reload's new gateway); unsent ones stay so."""
        for key, decision in decisions.items():
            if decision.supersedes(self._known.get(key)):
                self._known[key] = decision

    def carry_from(self, old: DecisionBook) -> None:
        self.adopt(old._known)
        for key, decision in old._unsent.items():
            self._unsent.setdefault(key, decision)

    def get(self, key: str) -> Decision | None:
        return self._known.get(key)

    @property
    def known(self) -> Mapping[str, Decision]:
        return self._known

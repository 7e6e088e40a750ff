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

import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

import msgspec

from gateway.state.limits import (
    FUTURE_SKEW_S,
    MAX_EJECT_S,
    MAX_INT64,
    OPERATOR_REASON_CHARS,
    Key,
    Name,
    Reason,
    Version,
    Wall,
)
from gateway.state.rejects import Rejects

Action = Literal["drain", "eject", "restore", "pause", "resume"]
REPLICA_ACTIONS: frozenset[str] = frozenset({"drain", "eject", "restore"})
POOL_ACTIONS: frozenset[str] = frozenset({"pause", "resume"})
# what takes a target out
HOLDING: frozenset[str] = frozenset({"drain", "eject", "pause"})
# a rollout's progress rides as a decision whose action is its phase (`gateway.rollout.progress`)
ROLLOUT_PHASES: frozenset[str] = frozenset(
    {"waiting", "shadow", "canary", "paused", "rolled_back", "promoted", "aborted"}
)
ACTIONS_BY_KIND: dict[str, frozenset[str]] = {
    "replica": REPLICA_ACTIONS,
    "pool": POOL_ACTIONS,
    "rollout": ROLLOUT_PHASES,
}


def replica_key(replica_id: str) -> str:
    return f"replica:{replica_id}"


def pool_key(pool: str) -> str:
    return f"pool:{pool}"


class Decision(msgspec.Struct, frozen=True, array_like=True):
    """What an operator (``by``) decided for ``key`` at wall time ``at``, and why.

    Encoded as a JSON array in field order (the layout the store scripts read); decoding
    checks every bound (`gateway.state.limits`) and that the action fits the target's kind.
    """

    # replica:<id> | pool:<name> | rollout:<model>
    key: Key
    # one of Action (or a rollout phase)
    action: str
    # wall seconds an eject ends; 0: until another decision
    until: Wall
    # the operator's name (never a key)
    by: Name
    reason: Reason
    # wall seconds
    at: Wall
    version: Version
    # the gateway instance that took it
    origin: Name

    def __post_init__(self) -> None:
        kind, _, target = self.key.partition(":")
        if self.action not in ACTIONS_BY_KIND.get(kind, ()) or not target:
            raise ValueError(f"no action {self.action!r} on a target {self.key[:40]!r}")
        if kind != "rollout" and len(self.reason) > OPERATOR_REASON_CHARS:
            raise ValueError(f"reason: over {OPERATOR_REASON_CHARS} characters")
        if self.until > self.at + MAX_EJECT_S + 1.0:
            raise ValueError(f"until: more than {MAX_EJECT_S:.0f} s after it was decided")

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
        return msgspec.json.encode(self).decode()

    @classmethod
    def decode(cls, text: str | bytes) -> Decision:
        """The decision ``text`` holds; `ValueError` when it is malformed or out of bounds."""
        return msgspec.json.decode(text, type=cls)

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


# why a stored decision must not be obeyed, or None
Vet = Callable[[Decision], str | None]


class DecisionBook:
    """The winning decision per target as known here; the queue of those to offer the store.

    A stored decision is obeyed only if it passes ``vet`` (set by whoever owns its kind of
    target: the rollouts vet their progress) and is not stamped in the future; one refused is
    counted in ``rejects``, never known here, so never offered back, and this book's next
    decision on its target outranks it (so the store takes it in its place).
    """

    def __init__(self, origin: str, rejects: Rejects | None = None) -> None:
        self.origin = origin
        self.rejects = rejects or Rejects()
        self.vet: Vet | None = None
        self._known: dict[str, Decision] = {}
        self._unsent: dict[str, Decision] = {}
        # target -> version of a stored decision refused
        self._floors: dict[str, int] = {}
        # decisions from elsewhere forgotten once deleted from the store
        self.forgotten = 0

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
        lease's fence, `gateway.state.lease`), known and queued at once. Versions stop at
        int64's end; past it the later ``at`` orders."""
        known = self._known.get(key)
        last = max(known.version if known is not None else 0, self._floors.pop(key, 0))
        version = min(max(last + 1, floor), MAX_INT64)
        decision = Decision(key, action, until, by, reason, at, version, self.origin)
        self._known[key] = self._unsent[key] = decision
        return decision

    def take_unsent(self) -> list[Decision]:
        unsent, self._unsent = list(self._unsent.values()), {}
        return unsent

    def observe(
        self, stored: Mapping[str, Decision], wall: float = math.inf, lost: bool = True
    ) -> list[Decision]:
        """The stored decisions newer than what is known here (to obey). What the store lacks
        or holds older is queued to be offered again if it was decided here, or if the store
        ``lost`` its data (a new generation); one from elsewhere that the store no longer
        holds, with no data lost, was deleted there on purpose: it is forgotten here too (no
        longer obeyed, never pushed back)."""
        fresh = []
        refused = set()
        for key, decision in stored.items():
            if decision.supersedes(self._known.get(key)):
                why = self._refusal(decision, wall)
                if why is not None:
                    refused.add(key)
                    self._floors[key] = max(self._floors.get(key, 0), decision.version)
                    self.rejects.drop("store", _kind(decision), f"{key}@{decision.version}", why)
                    continue
                self._known[key] = decision
                fresh.append(decision)
                pending = self._unsent.get(key)
                if pending is not None and decision.supersedes(pending):
                    del self._unsent[key]
        for key, decision in list(self._known.items()):
            if key in refused or not decision.supersedes(stored.get(key)):
                continue
            if lost or decision.origin == self.origin:
                self._unsent.setdefault(key, decision)
            elif key not in stored:
                del self._known[key]
                self.forgotten += 1
        return fresh

    def _refusal(self, decision: Decision, wall: float) -> str | None:
        if decision.at > wall + FUTURE_SKEW_S:
            return f"decided {decision.at - wall:.0f} s in the future"
        return self.vet(decision) if self.vet is not None else None

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


def _kind(decision: Decision) -> str:
    return "progress" if decision.kind == "rollout" else "decision"

"""Operators' decisions made real on the registry: drained or ejected replicas, paused pools.

One reconciler, `ManualControls.apply`, reads the winning decision per target (a
`DecisionBook`'s, local or from other gateways) and brings the registry in line, so the same
call serves a fresh action, a pull from the store, an ejection that ran out, and a reload or
restart (the decisions are read back and applied again). It is idempotent.

- drain / eject (until its time): the pool's own drain (`Pool.drain`): out of eligibility at
  once, in-flight attempts finish on the same object, health probes go on (the tile still shows
  health). Panic mode cannot bring it back: it is not a member while held, and DNS discovery
  listing it again does not either (``Pool.held``).
- restore, or an eject that ran out: the replica rejoins (`Pool.add`) as it was. Only replicas
  held here are brought back, never one that DNS discovery is draining.
- pause / resume: ``Pool.paused`` (eligibility then has no replica for it; the route falls
  back or answers 503 saying the pool is paused).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.clock import Clock
from gateway.state.decisions import Decision
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)
Change = tuple[str, str]  # (target, what happened to it)


def describe(decision: Decision) -> str:
    """``drained by alice: disk full`` (what the pool's or the replica's state says)."""
    verb = {"drain": "drained", "eject": "ejected", "pause": "paused"}.get(
        decision.action, decision.action
    )
    text = f"{verb} by {decision.by}"
    return f"{text}: {decision.reason}" if decision.reason else text


class ManualControls:
    def __init__(self, registry: Registry, clock: Clock) -> None:
        self._registry = registry
        self._clock = clock
        self.held: dict[str, Decision] = {}  # replica id -> the decision holding it out

    def find(self, replica_id: str) -> tuple[Pool, Replica] | None:
        """The replica with that id, serving or held (draining) in its pool."""
        for pool in self._registry.pools.values():
            for replica in (*pool.replicas, *pool.draining):
                if replica.id == replica_id:
                    return pool, replica
        return None

    def apply(self, decisions: Mapping[str, Decision]) -> list[Change]:
        """Brings the registry in line with ``decisions``; returns what changed (target, what)."""
        wall = self._clock.wall()
        changed: list[Change] = []
        for name, pool in self._registry.pools.items():
            decision = decisions.get(f"pool:{name}")
            paused = describe(decision) if decision is not None and decision.holds(wall) else None
            if paused != pool.paused:
                pool.paused = paused
                changed.append((f"pool:{name}", paused or "resumed"))
        for decision in decisions.values():
            if decision.kind == "replica":
                changed += self._replica(decision, wall)
        for rid in [r for r in self.held if f"replica:{r}" not in decisions]:
            changed += self._release(rid)  # its decision is gone (a reload's new book)
        for target, what in changed:
            log.info("manual control: %s %s", target, what)
        return changed

    def _replica(self, decision: Decision, wall: float) -> list[Change]:
        rid = decision.target
        if not decision.holds(wall):
            return self._release(rid)
        found = self.find(rid)
        self.held[rid] = decision
        if found is None:
            return []  # not here (yet): held as soon as it joins, by the next apply
        pool, replica = found
        pool.held = pool.held | {rid}
        if replica in pool.replicas:
            self._registry.drain(pool, rid)
            return [(decision.key, describe(decision))]
        return []

    def _release(self, rid: str) -> list[Change]:
        if self.held.pop(rid, None) is None:
            return []
        found = self.find(rid)
        if found is None:
            return []
        pool, replica = found
        pool.held = pool.held - {rid}
        if replica in pool.draining:
            pool.add(replica)
            return [(f"replica:{rid}", "back in service")]
        return []

    def snapshot(self, decisions: Mapping[str, Decision]) -> dict[str, Any]:
        """For ``/admin/state``: every decision on a replica or pool, in force (or ended, with
        its time), by target (a rollout's progress is shown by ``/admin/rollouts``)."""
        wall = self._clock.wall()
        return {
            key: {**d.to_json(), "holds": d.holds(wall), "state": describe(d)}
            for key, d in sorted(decisions.items())
            if d.kind in ("replica", "pool")
        }

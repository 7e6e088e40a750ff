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
- a drain or eject decided on another gateway (read from the store) holds only within the
  pool's ejected-share cap (`outlier.within_cap`, this gateway's own decisions counted first),
  so a forged "drain every replica" in the store takes out what an outlier ejection could.
- pause / resume: ``Pool.paused`` (eligibility then has no replica for it; the route falls
  back or answers 503 saying the pool is paused).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.clock import Clock
from gateway.state.decisions import Decision
from gateway.state.rejects import Rejects
from gateway.upstream.outlier import within_cap
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)
# (target, what happened to it)
Change = tuple[str, str]


# The author of the accelerator rules' drains (`gateway.accelerator.sampler`).
HARDWARE = "hardware"


def describe(decision: Decision) -> str:
    """``drained by alice: disk full`` (what the pool's or the replica's state says); the
    accelerator rules' own: ``drained: hardware — temperature 93 °C, slowdown at 90 °C``."""
    verb = {"drain": "drained", "eject": "ejected", "pause": "paused"}.get(
        decision.action, decision.action
    )
    if decision.by == HARDWARE:
        return f"{verb}: {HARDWARE} — {decision.reason}"
    text = f"{verb} by {decision.by}"
    return f"{text}: {decision.reason}" if decision.reason else text


class ManualControls:
    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        origin: str | None = None,
        rejects: Rejects | None = None,
    ) -> None:
        """``origin``: this gateway; drains and ejects decided elsewhere (read from the store)
        hold only within each pool's ejected-share cap, as outlier ejections do."""
        self._registry = registry
        self._clock = clock
        self._origin = origin
        self._rejects = rejects or Rejects()
        # replica id -> the decision holding it out
        self.held: dict[str, Decision] = {}
        # replica id -> why a remote decision is not obeyed
        self.refused: dict[str, str] = {}

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
        refused = self._over_cap(decisions, wall)
        for decision in decisions.values():
            if decision.kind == "replica":
                if decision.target in refused:
                    changed += self._release(decision.target)
                else:
                    changed += self._replica(decision, wall)
        for rid in refused.keys() - self.refused.keys():
            self._rejects.drop("store", "capped", f"replica:{rid}", refused[rid])
        self.refused = refused
        for rid in [r for r in self.held if f"replica:{r}" not in decisions]:
            # its decision is gone (a reload's new book)
            changed += self._release(rid)
        for target, what in changed:
            log.info("manual control: %s %s", target, what)
        return changed

    def _over_cap(self, decisions: Mapping[str, Decision], wall: float) -> dict[str, str]:
        """Replicas whose holding decision came from elsewhere and would take its pool past
        the ejected-share cap (this gateway's own count first; then the oldest first)."""
        if self._origin is None:
            return {}
        holding = [d for d in decisions.values() if d.kind == "replica" and d.holds(wall)]
        holding.sort(key=lambda d: (d.origin != self._origin, d.at, d.key))
        out: dict[str, int] = {}
        refused = {}
        for decision in holding:
            found = self.find(decision.target)
            if found is None:
                continue
            pool = found[0]
            size = len(pool.replicas) + sum(1 for r in pool.draining if r.id in pool.held)
            count = out.get(pool.name, 0)
            percent = pool.config.outlier.max_ejection_percent
            if decision.origin != self._origin and not within_cap(count, size, percent):
                refused[decision.target] = f"pool {pool.name}'s ejected-share cap ({percent} %)"
                continue
            out[pool.name] = count + 1
        return refused

    def _replica(self, decision: Decision, wall: float) -> list[Change]:
        rid = decision.target
        if not decision.holds(wall):
            return self._release(rid)
        found = self.find(rid)
        self.held[rid] = decision
        if found is None:
            # not here (yet): held as soon as it joins, by the next apply
            return []
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
        doc = {}
        for key, d in sorted(decisions.items()):
            if d.kind not in ("replica", "pool"):
                continue
            refused = self.refused.get(d.target) if d.kind == "replica" else None
            holds = d.holds(wall) and refused is None
            state = describe(d) if refused is None else f"not obeyed: {refused}"
            doc[key] = {**d.to_json(), "holds": holds, "state": state}
        return doc

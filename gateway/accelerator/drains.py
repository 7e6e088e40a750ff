"""What the accelerator rules advise, carried out as the operators' own drain.

A drain is a `Decision` by ``hardware`` (`Decider.decide`): obeyed at once here, shared
like an operator's drain, audited, in the timeline, and its reason is the evidence
("temperature 93 °C, slowdown at 90 °C"). It never undoes an operator's decision, and it
holds two limits: no more of a pool out than its outlier ``max_ejection_percent`` (at least
one may go), and never the last replica of a pool unless every model it serves has a
fallback that can answer. A stale reading drains nothing (`AcceleratorTracker` never asks).
A throttled GPU's replica gets the weight its advice says.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gateway.accelerator.rules import Evidence
from gateway.accelerator.tracker import AcceleratorTracker, Advice, Want
from gateway.clock import Clock
from gateway.state.decisions import Decision, DecisionBook, replica_key
from gateway.telemetry.audit import AuditEvent
from gateway.upstream.controls import HARDWARE
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)
# the decisions' author
BY = HARDWARE
# may this pool lose its last replica (a fallback serves)?
MayEmpty = Callable[[str], bool]


class Decider(Protocol):
    """Where decisions are taken, shared and audited
    (`gateway.control.shared_state.SharedState`)."""

    origin: str
    decisions: DecisionBook

    def decide(
        self, key: str, action: str, by: str, reason: str, until: float = 0.0, floor: int = 0
    ) -> Decision: ...

    async def publish(self) -> str | None: ...

    def audit(self, event: AuditEvent) -> None: ...


class AcceleratorDrains:
    """Drains, restores and weights asked for by the trackers' advice, within the pool's limits.
    ``states``: the sampler's, by replica id (a drained replica still counts as out)."""

    def __init__(
        self,
        shared: Decider,
        may_empty: MayEmpty,
        clock: Clock,
        states: dict[str, AcceleratorTracker],
    ) -> None:
        self._shared = shared
        self._may_empty = may_empty
        self._clock = clock
        self.states = states
        # (pool, replica, signal) -> count
        self.drains: dict[tuple[str, str, str], int] = {}
        # replica id -> why a drain it asked for waits
        self.held_back: dict[str, str] = {}

    async def act(
        self, pool: Pool, replica: Replica, state: AcceleratorTracker, advice: Advice
    ) -> None:
        if replica.weight != advice.weight:
            replica.set_weight(advice.weight)
            cause = state.weight_evidence.text if state.weight_evidence else "no throttling"
            weight = advice.weight
            log.warning("replica %s: balancer weight %.2f (%s)", replica.id, weight, cause)
        key = replica_key(replica.id)
        decision = self._shared.decisions.get(key)
        wall = self._clock.wall()
        held = decision is not None and decision.holds(wall)
        ours = held and decision is not None and decision.by == BY
        if ours and state.drained is None and decision is not None:
            # another gateway's accelerator drain, or one from before a reload or restart
            state.drained = advice.drain or Evidence(
                "earlier", "drain now", 0.0, 0.0, decision.reason
            )
        if advice.want is Want.DRAIN and advice.drain is not None:
            if held:
                return
            why = self._refusal(pool, replica)
            if why is not None:
                if self.held_back.get(replica.id) != why:
                    text = advice.drain.text
                    log.warning(
                        "replica %s: accelerator drain held back (%s): %s", replica.id, why, text
                    )
                self.held_back[replica.id] = why
                return
            self.held_back.pop(replica.id, None)
            await self._decide(pool, replica, state, "drain", advice.drain)
        elif advice.want is Want.RESTORE:
            if ours:
                await self._decide(pool, replica, state, "restore", None)
            state.drained = None

    def _refusal(self, pool: Pool, replica: Replica) -> str | None:
        """Why draining ``replica`` now would break the pool's limits; None: it may go."""
        out = sum(1 for s in (self.states.get(r.id) for r in pool.draining) if s and s.drained)
        # the share out counts the outlier's ejections
        out += pool.outlier.ejected_count()
        serving = [r for r in pool.replicas if r is not replica and r.healthy is not False]
        if not serving and not self._may_empty(pool.name):
            return "the last healthy replica of its pool, and no fallback can serve its model"
        total = len(pool.replicas) + len(pool.draining)
        cap = pool.config.outlier.max_ejection_percent * total / 100
        if out >= 1 and out + 1 > cap:
            return f"ejected-share cap: {out} of {total} already out"
        return None

    async def _decide(
        self,
        pool: Pool,
        replica: Replica,
        state: AcceleratorTracker,
        action: str,
        evidence: Evidence | None,
    ) -> None:
        key = replica_key(replica.id)
        if evidence is not None:
            reason = evidence.text
            state.drained = evidence
            count = (pool.name, replica.id, evidence.signal)
            self.drains[count] = self.drains.get(count, 0) + 1
        else:
            reason = f"accelerator healthy for {state.healthy_for_s:g} s"
        shared = self._shared
        shared.decide(key, action, BY, reason)
        not_shared = await shared.publish()
        outcome = "applied" if not_shared is None else f"applied here, not shared yet: {not_shared}"
        event = AuditEvent(self._clock.wall(), BY, action, key, reason, outcome, shared.origin)
        shared.audit(event)

"""A gateway's rollouts wired to its shared state, SLOs and metrics (what `Gateway` builds).

`Fleet` is the part of the gateway's shared state (`gateway.control.shared_state.SharedState`) the
rollouts use: decisions (taken, known, audited, published), whether the store was read, the
lease and shared counters when a fleet shares a store.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.rollout.controller import Rollouts
from gateway.rollout.service import RolloutTicker
from gateway.state.base import CounterDelta
from gateway.state.decisions import Decision, DecisionBook
from gateway.state.lease import Lease
from gateway.telemetry.audit import AuditEvent
from gateway.telemetry.metrics import Metrics


class Fleet(Protocol):
    origin: str
    decisions: DecisionBook
    # None without a shared store
    sync: Any

    def decide(
        self, key: str, action: str, by: str, reason: str, until: float = 0.0, floor: int = 0
    ) -> Decision: ...

    def audit(self, event: AuditEvent) -> None: ...

    def synced(self) -> bool: ...

    async def publish(self) -> str | None: ...

    async def lease(self, name: str, ttl_s: float, release: bool = False) -> Lease | None: ...

    def share_counters(
        self,
        export: Callable[[], Mapping[str, CounterDelta]],
        apply: Callable[[Mapping[str, int], bool], None],
    ) -> None: ...


def rollouts_for(
    models: Mapping[str, ModelConfig],
    clock: Clock,
    rng: random.Random,
    fleet: Fleet,
    burning: Callable[[str], bool],
    metrics: Metrics,
) -> Rollouts:
    """The rollouts of ``models``: progress as ``fleet``'s decisions; with a shared store, one
    gateway leads and the evidence is pooled; their series set at each scrape."""
    shared = fleet.sync is not None
    rollouts = Rollouts(
        models,
        clock,
        rng,
        decide=fleet.decide,
        known=fleet.decisions.get,
        audit=fleet.audit,
        burning=burning,
        synced=fleet.synced,
        origin=fleet.origin,
        leased=shared,
    )
    if rollouts.runs:
        # progress read back is checked against the plan
        fleet.decisions.vet = rollouts.vet
        if shared:
            fleet.share_counters(rollouts.pool.export_deltas, rollouts.pool.apply_remote)
        metrics.on_scrape(lambda: metrics.set_rollouts(rollouts.snapshot()))
    return rollouts


def rollout_ticker(rollouts: Rollouts, fleet: Fleet, clock: Clock) -> RolloutTicker:
    """The rollouts' background chores, with the fleet's lease when a store is shared."""
    return RolloutTicker(
        rollouts, fleet.publish, clock, fleet.lease if fleet.sync is not None else None
    )

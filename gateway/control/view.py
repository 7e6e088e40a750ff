"""What the workers route by, read off the control process's gateway as one `Snapshot`.

The control's `Gateway` holds every decision: membership and each replica's health, ejection,
quarantine, weight and spare role (probes, the outlier detector fed by every worker's attempts,
discovery, operators' decisions, accelerator drains) and its freshest load reading (from any
worker's answers or a scrape), each pool's pause and held replicas and
learned dialect, each model's burn-policy adjustment, its fallback's verdict, its metadata and
its rollout's progress, whether its burn policy serves it by a vote (and why), and whether the
gateway drains. `FleetView.snapshot` reads them all,
whole; the publisher (`gateway.snapshot.publisher`) sends it when it changed.

Breakers: each worker keeps its own (they trip on its own requests at once), and a transition
one of them makes is also the control's: it is forced on the control's breaker for that
replica (`follow_worker`), which its listeners then hear of (metrics, history, shared state),
and it becomes a `BreakerSignal` with the next sequence number, naming its origin, so every
other worker's breaker follows it once. A transition the control's own breaker makes (a health
probe's trial, another gateway's signal through Redis) is a signal from the control.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, cast

import orjson

from gateway.control.runtime import Gateway
from gateway.snapshot.loads import load_view
from gateway.snapshot.messages import (
    AdjustmentView,
    BreakerSignal,
    ModelView,
    PoolView,
    ReplicaView,
    RolloutView,
    Snapshot,
)
from gateway.upstream.registry import Pool

# the origin of a signal the control's own breaker made
CONTROL = -1

BreakerState = Literal["closed", "open", "half-open"]


class FleetView:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        self._signals: dict[str, BreakerSignal] = {}
        self._seq = 0
        self._origin = CONTROL
        # by model: (document, its JSON)
        self._metadata: dict[str, tuple[object, bytes]] = {}
        gateway.events.add(self)

    def bind(self, gateway: Gateway) -> None:
        """A reload's gateway takes over: read from it, hear its breakers."""
        self._gateway = gateway
        self._metadata.clear()
        gateway.events.add(self)

    # --- breakers -----------------------------------------------------------------------

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        self._seq += 1
        state = cast(BreakerState, new)
        self._signals[replica] = BreakerSignal(replica, state, self._seq, self._origin)

    def ejection(self, replica: str, reason: str) -> None:
        """Not a breaker's: ejections reach the workers as the replicas' own state."""

    def quarantine(self, replica: str, reason: str) -> None:
        """Not a breaker's: quarantines reach the workers as the replicas' own state."""

    def follow_worker(self, worker: int, replica_id: str, state: str) -> None:
        """Worker ``worker``'s breaker for ``replica_id`` went to ``state``."""
        replica = self._gateway.registry.replica(replica_id)
        if replica is None or replica.breaker is None:
            return
        with self._from(worker):
            replica.breaker.force(state)

    @contextmanager
    def _from(self, worker: int) -> Iterator[None]:
        self._origin = worker
        try:
            yield
        finally:
            self._origin = CONTROL

    # --- the snapshot -------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The whole view now (version and time are the publisher's to set)."""
        gateway = self._gateway
        pools = tuple(_pool_view(pool) for pool in gateway.registry.pools.values())
        models = {name: self._model_view(name) for name in gateway.config.models}
        return Snapshot(
            version=0,
            sent_at=gateway.clock.now(),
            draining=gateway.draining is not None,
            pools=pools,
            models=models,
            breakers=tuple(self._signals.values()),
        )

    def _model_view(self, name: str) -> ModelView:
        gateway = self._gateway
        model = gateway.config.models[name]
        adjustment = gateway.slo.current(name)
        refusal = None
        if model.fallback is not None:
            refusal = gateway.fallback_refusal(model.fallback.model)
        rollout = None
        run = gateway.rollouts.runs.get(name)
        if run is not None and run.progress is not None:
            progress = run.progress
            rollout = RolloutView(progress.phase, progress.step, progress.share(run.config))
        return ModelView(
            adjustment=AdjustmentView(**dataclasses.asdict(adjustment)),
            fallback_refusal=refusal,
            metadata=self._metadata_of(name),
            rollout=rollout,
            escalation=gateway.slo.escalated.get(name),
        )

    def _metadata_of(self, name: str) -> bytes | None:
        """The model's metadata as JSON, encoded once per document fetched."""
        document = self._gateway.metadata.cached(name)
        if document is None:
            return None
        known = self._metadata.get(name)
        if known is None or known[0] is not document:
            known = self._metadata[name] = (document, orjson.dumps(document))
        return known[1]


def _pool_view(pool: Pool) -> PoolView:
    members = tuple(
        ReplicaView(
            id=r.id,
            url=r.url,
            zone=r.zone,
            standby=r.standby,
            healthy=r.healthy,
            ejected_until=r.ejected_until,
            ejection_reason=r.ejection_reason,
            quarantined_until=r.quarantined_until,
            quarantine_reason=r.quarantine_reason,
            weight=r.weight,
            load=None if r.load is None else load_view(r.load, r.load_at, accelerator=False),
        )
        for r in pool.replicas
    )
    binary = pool.dialect.binary_tensors if pool.dialect.configured is None else None
    return PoolView(
        name=pool.name,
        paused=pool.paused,
        held=tuple(sorted(pool.held)),
        binary_tensors=binary,
        members=members,
    )

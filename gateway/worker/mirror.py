"""A worker's registry and models as the control process last saw them: snapshots applied.

Each `Snapshot` is whole, so applying one makes this worker's view equal to the control's
for everything the control decides: which replicas are members (a replica discovery added
joins, one that left is drained: its attempts in flight finish), each one's health, ejection,
quarantine, weight and spare role, a pool's pause and the replicas an operator holds out, a
learned binary-tensor dialect, each model's burn-policy adjustment, whether its fallback may
answer, its metadata once fetched, a rollout's progress, whether the burn policy serves it by a
vote (`escalated`, kept in place: the pipeline's escalating routes read it), and whether the
gateway is draining. Each replica's load reading is taken where it is fresher than this
worker's own (another worker's answers reported it, or the control scraped it:
`gateway.snapshot.loads`).
A breaker transition another worker (or the control's health probes) made is forced on this
worker's breaker once (`BreakerSignal.seq`), muted so that it is not shipped back as this
worker's own. Names a snapshot carries that this worker's config does not know (a reload
under way) are left out until the worker runs the same config.
"""

from __future__ import annotations

import logging
import math

import orjson

from gateway.config.replica import ReplicaConfig
from gateway.serving import Serving
from gateway.slo.policy import NORMAL, PolicyAdjustment
from gateway.snapshot.loads import load_report
from gateway.snapshot.messages import (
    AdjustmentView,
    Loads,
    LoadView,
    PoolView,
    ReplicaView,
    Snapshot,
)
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica
from gateway.worker.shipped import ShippedEvents, WorkerRollouts

log = logging.getLogger(__name__)

DRAINING = "draining: the gateway is shutting down"


class Mirror:
    def __init__(
        self,
        serving: Serving,
        rollouts: WorkerRollouts,
        events: ShippedEvents,
        worker: int,
        loads_known: dict[str, float] | None = None,
    ) -> None:
        """``loads_known``: the time of each replica's reading this worker has shipped or
        taken here (one taken from a snapshot is not shipped back)."""
        self._serving = serving
        self._loads_known = {} if loads_known is None else loads_known
        self._rollouts = rollouts
        self._events = events
        self._worker = worker
        # of the last snapshot applied (0: none yet)
        self.version = 0
        self.adjustments: dict[str, PolicyAdjustment] = {}
        # the control's refusals, by fallback model
        self.fallback_refusals: dict[str, str] = {}
        # models served by a vote now: why
        self.escalated: dict[str, str] = {}
        # the last signal applied, by replica
        self._breakers: dict[str, int] = {}

    def adjust(self, model: str) -> PolicyAdjustment:
        """A model's burn-policy adjustment as the control decided it (the pipeline's)."""
        return self.adjustments.get(model, NORMAL)

    def apply(self, snapshot: Snapshot) -> None:
        serving = self._serving
        serving.draining = DRAINING if snapshot.draining else None
        pools = serving.registry.pools
        for view in snapshot.pools:
            pool = pools.get(view.name)
            if pool is not None:
                self._pool(pool, view)
        models = serving.config.models
        adjustments: dict[str, PolicyAdjustment] = {}
        refusals: dict[str, str] = {}
        escalated: dict[str, str] = {}
        for name, model_view in snapshot.models.items():
            model = models.get(name)
            if model is None:
                continue
            adjustment = model_view.adjustment
            if adjustment != _NORMAL_VIEW:
                adjustments[name] = _adjustment(adjustment)
            if model.fallback is not None and model_view.fallback_refusal is not None:
                refusals[model.fallback.model] = model_view.fallback_refusal
            if model_view.metadata is not None and serving.metadata.cached(name) is None:
                self._metadata(name, model_view.metadata)
            if model_view.escalation is not None:
                escalated[name] = model_view.escalation
        self.adjustments = adjustments
        # in place: the pipeline's escalating routes read it
        if escalated != self.escalated:
            self.escalated.clear()
            self.escalated.update(escalated)
        # in place: the worker's fallbacks read it
        if refusals != self.fallback_refusals:
            self.fallback_refusals.clear()
            self.fallback_refusals.update(refusals)
        self._rollouts.follow({n: v.rollout for n, v in snapshot.models.items()})
        self._signals(snapshot)
        self.version = snapshot.version

    def loads(self, loads: Loads) -> None:
        """Replicas' load readings alone (`Loads`): each fresher than the replica's own. A
        reading no fresher than one this worker shipped or took is passed over before its
        replica is looked up: under load most are this worker's own, coming back."""
        registry = self._serving.registry
        known = self._loads_known
        for replica_id, load in loads.loads.items():
            if load.at <= known.get(replica_id, -math.inf):
                continue
            replica = registry.replica(replica_id)
            if replica is not None:
                self._take_load(replica, load)
        self.version = loads.version

    def _take_load(self, replica: Replica, load: LoadView | None) -> None:
        """``load`` as the replica's reading, if fresher than its own."""
        if load is not None and load.at > replica.load_at:
            replica.report_load(load_report(load), load.at)
            self._loads_known[replica.id] = load.at

    def _pool(self, pool: Pool, view: PoolView) -> None:
        registry = self._serving.registry
        members = {r.id: r for r in view.members}
        current = {r.id: r for r in pool.replicas}
        for replica_id in current.keys() - members.keys():
            registry.drain(pool, replica_id)
        for replica_id, member in members.items():
            if replica_id not in current:
                registry.add(pool, _replica_config(member))
        for replica in pool.replicas:
            member = members[replica.id]
            replica.follow(
                healthy=member.healthy,
                ejected_until=member.ejected_until,
                ejection_reason=member.ejection_reason,
                quarantined_until=member.quarantined_until,
                quarantine_reason=member.quarantine_reason,
                weight=member.weight,
                standby=member.standby,
            )
            self._take_load(replica, member.load)
        for replica in pool.draining:
            if replica.outstanding <= 0:
                registry.release(pool, replica)
        pool.paused = view.paused
        pool.held = frozenset(view.held)
        if view.binary_tensors is not None and pool.dialect.configured is None:
            pool.dialect.learn_binary(view.binary_tensors)

    def _signals(self, snapshot: Snapshot) -> None:
        """Breaker states another worker (or the control) reached, forced here once each."""
        self._events.muted = True
        try:
            for signal in snapshot.breakers:
                if signal.seq <= self._breakers.get(signal.replica, 0):
                    continue
                self._breakers[signal.replica] = signal.seq
                if signal.origin_worker == self._worker:
                    continue
                replica = self._serving.registry.replica(signal.replica)
                if replica is not None and replica.breaker is not None:
                    replica.breaker.force(signal.state)
        finally:
            self._events.muted = False

    def _metadata(self, name: str, document: bytes) -> None:
        try:
            metadata = orjson.loads(document)
        except orjson.JSONDecodeError:
            log.warning("model %s: the control sent metadata that is not JSON", name)
            return
        if isinstance(metadata, dict):
            self._serving.metadata.put(name, metadata)


_NORMAL_VIEW = AdjustmentView()


def _adjustment(view: AdjustmentView) -> PolicyAdjustment:
    return PolicyAdjustment(
        retry_budget_factor=view.retry_budget_factor,
        hedging_enabled=view.hedging_enabled,
        fallback_margin_factor=view.fallback_margin_factor,
        reason=view.reason,
    )


def _replica_config(view: ReplicaView) -> ReplicaConfig:
    return ReplicaConfig(id=view.id, url=view.url, zone=view.zone, standby=view.standby)

"""A data-plane worker's gateway: what serves requests, with nothing that decides.

`WorkerRuntime` is `gateway.serving.Serving` built with the link's stand-ins
(`gateway.worker.shipped`): what the request path tells the metrics, the outlier detector,
the vote's suspects, the rollouts' evidence, the audits' verdicts and the upstream events is
shipped to the control process in the worker's batches, and so is each answer (one tuple, as
the answer tape takes it). The control's decisions come back as snapshots (`mirror`); among
them, which models the burn policy serves by a vote (`Mirror.escalated`, read in place by the
pipeline). The limits the config sets for the whole gateway are this worker's share of them
(`gateway.config.shares`). Nothing runs in the background here but the request path and the
shipper; the fallback models are loaded and verified at start, and refused while the control
process says so.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from gateway.clock import Clock
from gateway.config.models import GatewayConfig
from gateway.config.shares import worker_share
from gateway.config.tenants import ANONYMOUS
from gateway.memory.inflight_bytes import machine_default
from gateway.pipeline.fallback import FallbackRunner
from gateway.policies.load_report import ANSWER
from gateway.serving import Serving
from gateway.slo.policy import NORMAL, PolicyAdjustment
from gateway.snapshot.loads import load_view
from gateway.snapshot.messages import Gauges, LoadView
from gateway.snapshot.shipper import BatchShipper
from gateway.telemetry.tracing import Tracer
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.local_errors import LOCAL_RESOURCE_ERRORS
from gateway.worker.mirror import Mirror
from gateway.worker.shipped import (
    ShippedAudits,
    ShippedEvents,
    ShippedMetrics,
    ShippedReactions,
    ShippedSuspects,
    WorkerRollouts,
)


class WorkerRuntime(Serving):
    def __init__(
        self,
        config: GatewayConfig,
        shipper: BatchShipper,
        *,
        worker: int,
        workers: int,
        clock: Clock,
        rng: random.Random | None = None,
        transport: Transport | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """``config``: the whole gateway's (this worker takes its share of ``workers``)."""
        inflight = config.server.inflight_bytes or machine_default()
        config = worker_share(config, workers, inflight)
        self.shipper = shipper
        events = ShippedEvents(shipper)
        self.shipped_metrics = ShippedMetrics(shipper)
        super().__init__(
            config,
            clock,
            rng or random.Random(),
            tracer or Tracer(config.tracing),
            self.shipped_metrics,
            events,
            self._adjust,
            transport,
        )
        self.rollouts = WorkerRollouts(config.models, clock, self.rng, shipper)
        self.suspects = ShippedSuspects(shipper)
        self.reactions = ShippedReactions(shipper, self.shipped_metrics)
        # the time of each replica's reading shipped or taken from a snapshot: not shipped again
        self.loads_known: dict[str, float] = {}
        self.mirror = Mirror(self, self.rollouts, events, worker, self.loads_known)
        self.audits = ShippedAudits(shipper)
        self.escalated = self.mirror.escalated
        self.fallbacks = {
            name: _Refusable(model, name, self.mirror.fallback_refusals)
            for name, model in self.fallback_models.items()
        }

    def _adjust(self, model: str) -> PolicyAdjustment:
        return self.mirror.adjustments.get(model, NORMAL)

    async def start(self) -> None:
        await self.start_serving()

    async def stop(self) -> None:
        await self.stop_serving()

    def fallback_refusal(self, name: str) -> str | None:
        return self.mirror.fallback_refusals.get(name) or super().fallback_refusal(name)

    def observe(
        self,
        model: str,
        status: int,
        served_by: str,
        latency_s: float,
        degraded: str | None,
        deadline_s: float | None = None,
        tenant: str = ANONYMOUS,
        request_bytes: int = -1,
        response_bytes: int = -1,
        rows: int = -1,
        at: float | None = None,
    ) -> None:
        """One answer as the client saw it, shipped as the answer tape takes it."""
        when = self.clock.now() if at is None else at
        answer = (
            model,
            status,
            served_by,
            degraded,
            tenant,
            latency_s,
            deadline_s,
            request_bytes,
            response_bytes,
            rows,
            when,
        )
        self.shipper.answers.append(answer)

    def gauges(
        self,
        rss_bytes: int,
        cpu_s: float,
        inflight_bytes: tuple[int, int, int, int, int],
    ) -> Gauges:
        """This worker's levels now, for its next batch (``inflight_bytes``: its in-flight
        bytes' `BudgetLevels`, which its app holds)."""
        outstanding = {r.id: r.outstanding for r in self.registry.replicas() if r.outstanding}
        pipeline = self.pipeline
        admission, hedge, budget = pipeline.admission, pipeline.hedge, self.budget
        reports = pipeline.attempt.load_reports
        return Gauges(
            outstanding,
            {name: count for name, count in admission.in_flight.items() if count},
            self.budget.balance(),
            rss_bytes,
            cpu_s,
            dict(LOCAL_RESOURCE_ERRORS),
            dict(admission.shed),
            (hedge.hedges_sent, hedge.hedges_won),
            {
                name: {seat.name: seat.to_json() for seat in admission.share_of(name, model)}
                for name, model in self.config.models.items()
            },
            (budget.requests_total, budget.spent_total, budget.refused_total),
            {
                r.id: (r.breaker.half_open_granted, r.breaker.half_open_peak)
                for r in self.registry.replicas()
                if r.breaker is not None and r.breaker.half_open_granted
            },
            loads=self._new_loads(),
            load_reports={"taken": reports.taken, **reports.refused},
            inflight_bytes=inflight_bytes,
        )

    def _new_loads(self) -> dict[str, LoadView]:
        """Readings this worker's answers carried since its previous batch, by replica."""
        known = self.loads_known
        loads = {}
        for replica in self.registry.replicas():
            load = replica.load
            if load is not None and load.source == ANSWER:
                at = replica.load_at
                if at > known.get(replica.id, -math.inf):
                    loads[replica.id] = load_view(load, at)
                    known[replica.id] = at
        return loads


class _Refusable:
    """A fallback model that also answers "not ok" while the control process refuses it (its
    file changed under the watcher, say): `gateway.pipeline.fallback.FallbackRunner`."""

    __slots__ = ("_model", "_name", "_refusals")

    def __init__(self, model: FallbackRunner, name: str, refusals: Mapping[str, str]) -> None:
        self._model = model
        self._name = name
        self._refusals = refusals

    @property
    def ok(self) -> bool:
        return self._model.ok and self._name not in self._refusals

    async def infer(self, inputs: Mapping[str, Any]) -> Mapping[str, Any]:
        return await self._model.infer(inputs)

"""The running gateway in one process: what serves requests and what decides, together.

`Gateway` is `gateway.serving.Serving` plus everything that decides: health and golden probes,
discovery, fallback watchers, SLO evaluation, shared-state sync, rollouts' progress, the
history and the telemetry fold. The control process runs one and lends its data plane to
workers (`gateway.worker`); the in-process tests run one whole. Start order: transport,
pipeline, then the background services; stop runs the other way, so no background task
outlives the transport it uses. A start that fails stops whatever it had started (no
half-built gateway keeps probing). Draining (on SIGTERM) makes every readiness answer "not
ready: draining" while requests are still served.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gateway.accelerator.metrics import AcceleratorCollector
from gateway.accelerator.sampler import AcceleratorSampler
from gateway.clock import Clock, MonotonicClock
from gateway.config.models import GatewayConfig, ModelConfig
from gateway.control.answered import answer_tape
from gateway.control.audit_verdicts import AuditVerdicts
from gateway.control.history import HistoryRecorder
from gateway.control.shared_state import SharedState
from gateway.fallback.watcher import FallbackWatcher
from gateway.memory.inflight_bytes import BudgetLevels, InflightBytes
from gateway.periodic import Periodic
from gateway.rollout.controller import Rollouts
from gateway.rollout.wiring import rollout_ticker, rollouts_for
from gateway.serving import Serving
from gateway.slo.engine import SloBook
from gateway.telemetry.audit import AuditEvent
from gateway.telemetry.metrics import ANONYMOUS, Metrics
from gateway.telemetry.model_stats import ModelStats
from gateway.telemetry.slo_metrics import slo_gauges
from gateway.telemetry.topology import Topology
from gateway.telemetry.tracing import Tracer
from gateway.upstream.departures import Departures
from gateway.upstream.discovery.watch import DiscoveryService
from gateway.upstream.events import FanoutEvents
from gateway.upstream.probes.accelerator_pages import page_transport
from gateway.upstream.probes.extensions import BinaryLearner
from gateway.upstream.probes.golden_prober import GoldenProber
from gateway.upstream.probes.health import HealthProber
from gateway.upstream.probes.load import LoadScraper, load_transport
from gateway.upstream.probes.load_metrics import LoadCollector
from gateway.upstream.probes.metadata import MetadataWarmer
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.local_errors import LOCAL_RESOURCE_ERRORS
from gateway.voting.quarantine import Suspects

FALLBACK_RECHECK_S = 30.0
SLO_EVALUATE_S = 1.0


class Gateway(Serving):
    """Everything in one process: what serves requests (`Serving`) and what decides (probes,
    SLOs, shared state, rollouts' progress, history, telemetry). The control process runs one
    (serving no data-plane traffic: its workers do); so do the in-process tests."""

    metrics: Metrics
    rollouts: Rollouts

    def __init__(
        self,
        config: GatewayConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        transport: Transport | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        clock = clock or MonotonicClock()
        topology = _topology(config, self._pool_of)
        metrics = Metrics(tenants=config.tenants, topology=topology)
        models = config.models.items()
        self.slo = SloBook(
            {n: m.slos for n, m in models},
            clock,
            policies={n: m.burn_policy for n, m in models},
        )
        events = FanoutEvents(metrics)
        super().__init__(
            config,
            clock,
            rng or random.Random(),
            tracer or Tracer(config.tracing),
            metrics,
            events,
            self.slo.current,
            transport,
        )
        # what hears the registry's transitions (a fan-out)
        self.events = events
        # Triton's per-model statistics, as clients saw them
        self.stats = ModelStats()
        self.shared = SharedState(config.state, self.registry, self.slo, self.budget, clock)
        events.add(self.shared)
        # the dashboard's last minutes and event timeline
        self.history = HistoryRecorder(
            self.registry, self.slo, self.budget, self.fallback_models, config.models, clock
        )
        events.add(self.history)
        # candidates beside models' pools (shared progress)
        self.rollouts = rollouts_for(
            config.models, clock, self.rng, self.shared, self.slo.burning, metrics
        )
        # votes' and audits' verdicts, quarantines
        suspects = Suspects(self.registry)
        # the burn policy's vote's evidence
        suspects.heard = self._vote_verdict
        self.suspects = suspects
        # what audits and golden probes find: correctness SLOs, suspects, counts
        self.verdicts = AuditVerdicts(config.models, self.slo, suspects, metrics)
        self.audits = self.verdicts
        # the burn policy's votes, read by the pipeline
        self.escalated = self.slo.escalated
        self.slo.switched = self._switched
        self._services: list[Any] = []
        self._injected = transport
        # the data plane's levels (its workers' in control)
        self.levels: Levels = OwnLevels(self)
        # what `/admin/state` shows of the workers, in a control process (None: no workers)
        self.data_plane: Callable[[], dict[str, Any]] | None = None
        # pools with `accelerator:` only
        self.accelerators: AcceleratorSampler | None = None
        # pools with `load_aware` only
        self.load: LoadScraper | None = None
        self.answers = answer_tape(
            config.models, metrics, self.slo, self.stats, self.history, clock
        )
        self._install_scrape_hooks()

    async def start(self) -> None:
        """Starts everything; on any failure, stops what it started and raises."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        await self.start_serving()
        transport = self.transport
        watchers = [
            FallbackWatcher(m, self.clock, FALLBACK_RECHECK_S)
            for m in self.fallback_models.values()
        ]
        self._services = [
            HealthProber(self.registry, transport, self.clock, self.rng),
            GoldenProber(self.registry, transport, self.clock, self.rng, self.verdicts.golden),
            # what a replica that left leaves behind: sockets, series, records
            Departures(self.registry, transport, self.metrics, (self.suspects.forget_replica,)),
            # after the probers: joiners get probed
            DiscoveryService(self.registry, self.clock),
            # binary_tensors unset
            BinaryLearner(self.registry, transport, self.clock),
            *watchers,
            Periodic("slo-evaluate", SLO_EVALUATE_S, self.clock, self.slo.evaluate),
            MetadataWarmer(
                [n for n, m in self.config.models.items() if m.signature is None],
                lambda name: self.model_metadata(name, self.config.models[name]),
                self.clock,
            ),
            self.shared,
            rollout_ticker(self.rollouts, self.shared, self.clock),
            self.history.service(),
            self.answers.service(),
        ]
        # else: nothing
        if any(p.config.accelerator for p in self.registry.pools.values()):
            pages = page_transport(p.config.accelerator for p in self.registry.pools.values())
            self.accelerators = AcceleratorSampler(
                self.registry, pages, self.clock, self.rng, self.shared, self._may_empty
            )
            self.metrics.registry.register(AcceleratorCollector(self.accelerators))
            self._services.append(self.accelerators)
        aware = [p.config.load for p in self.registry.pools.values() if p.config.load_aware]
        # else: no report is read, nothing scraped
        if aware:
            # a test's fake upstream: pages come from it too
            injected = self._injected
            scrapes: Transport = injected or load_transport(aware)
            self.load = LoadScraper(
                self.registry, scrapes, self.clock, self.rng, owned=injected is None
            )
            collector = LoadCollector(self.load, self.clock, self.levels.load_reports)
            self.metrics.registry.register(collector)
            self._services.append(self.load)
        for service in self._services:
            # a failure here: `start` stops those already started
            service.start()

    async def stop(self) -> None:
        for service in reversed(self._services):
            await service.stop()
        self._services.clear()
        await self.stop_serving()

    def _vote_verdict(
        self, model: str, replica_id: str, rows: int, dissented: int, by: str
    ) -> None:
        """A vote's verdict on a leg, for the burn policy's vote: on the model's own pool's
        leg, the single route's evidence (`gateway.slo.escalation.VoteEscalation.observe`)."""
        escalation = self.slo.escalations.get(model)
        if escalation is None or by != "vote" or not escalation.engaged:
            return
        replica = self.registry.replica(replica_id)
        if replica is not None and replica.pool == self.config.models[model].pools[0]:
            escalation.observe(replica_id, rows, dissented)

    def _switched(self, model: str, engaged: bool, reason: str) -> None:
        """The burn policy's vote engaged or released for ``model``: in the audit trail (and
        so the timeline), and its gauge."""
        action = "escalate_to_vote" if engaged else "back_to_single_route"
        target, origin = f"model:{model}", self.shared.origin
        event = AuditEvent(
            self.clock.wall(), "burn_policy", action, target, reason, "applied", origin
        )
        self.shared.audit(event)
        self.metrics.escalated(model, engaged)

    def _may_empty(self, pool: str) -> bool:
        """Whether every model on ``pool`` has a fallback that answers (it may lose all)."""
        models = [m for m in self.config.models.values() if pool in m.pools]
        return bool(models) and all(
            m.fallback is not None and self.fallback_refusal(m.fallback.model) is None
            for m in models
        )

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
        """One answer as the client saw it: metrics, SLOs, history (the edge calls this once).

        ``deadline_s``: the time the client allowed; SLOs exclude deadlines under their floor.
        ``tenant``: who asked (a configured tenant or ANONYMOUS); a tenant's SLOs count only
        its requests. Bodies' sizes and the request's rows: -1 where not known. ``at``: when
        (`Clock.now`; None: now). Recorded on `answers` (`gateway.control.answered`).
        """
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
        self.answers.answers.append(answer)

    def statistics(self, name: str | None = None) -> dict[str, Any]:
        models = self.config.models
        chosen = {n: m.version for n, m in models.items() if name is None or n == name}
        self.answers.fold()
        return self.stats.triton(chosen)

    def _pool_of(self, replica_id: str) -> str | None:
        """The pool of a replica that joined while serving, for its metric labels."""
        replica = self.registry.replica(replica_id)
        return replica.pool if replica is not None else None

    def _install_scrape_hooks(self) -> None:
        for replica in self.registry.replicas():
            self.metrics.breaker_state(replica.id, "closed")

        def refresh() -> None:
            now = self.clock.now()
            for replica in self.registry.replicas():
                self.metrics.set_replica(
                    replica.id,
                    healthy=bool(replica.healthy),
                    ejected=replica.ejected_until > now,
                    outstanding=replica.outstanding,
                )
            for pool in self.registry.pools.values():
                self.metrics.set_ejections_active(pool.name, pool.outlier.ejected_count())
            levels = self.levels
            self.metrics.set_retry_budget(levels.retry_budget())
            for name in self.config.models:
                self.metrics.set_in_flight(name, levels.in_flight(name))
            self.metrics.state_store(self.shared.degraded)
            self.metrics.state_rejected(self.shared.rejects.counts)
            self.metrics.local_resource_errors(levels.local_errors())
            self.metrics.inflight_bytes(levels.inflight_bytes())
            self.metrics.set_slo(slo_gauges(self.slo.to_json()))

        self.metrics.on_scrape(refresh)


class Levels(Protocol):
    """The data plane's levels the metrics show: this process's own (`OwnLevels`), or in the
    control process the sum of its workers' (`gateway.control.intake.WorkerLevels`)."""

    def in_flight(self, model: str) -> int: ...

    def retry_budget(self) -> float: ...

    def local_errors(self) -> Mapping[str, int]: ...

    def shed(self, model: str) -> int: ...

    def hedges(self) -> tuple[int, int]:
        """Hedges sent and won so far."""
        ...

    def load_reports(self) -> Mapping[str, int]:
        """Load reports answers carried so far: ``taken``, and refused by why."""
        ...

    def tenants(self, model: str, config: ModelConfig) -> dict[str, dict[str, int]]:
        """The model's admission seats by tenant, their counts (`FairShare`'s)."""
        ...

    def inflight_bytes(self) -> BudgetLevels:
        """The in-flight bytes' levels, summed over whoever serves requests."""
        ...


class OwnLevels:
    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway
        # the in-flight bytes of the app serving requests here (`gateway.api.app`)
        self.memory: InflightBytes | None = None

    def inflight_bytes(self) -> BudgetLevels:
        memory = self.memory
        return memory.levels() if memory is not None else BudgetLevels(0, 0, 0, 0, 0)

    def in_flight(self, model: str) -> int:
        pipeline = self._gateway._pipeline
        return pipeline.admission.in_flight[model] if pipeline is not None else 0

    def retry_budget(self) -> float:
        return self._gateway.budget.balance()

    def local_errors(self) -> Mapping[str, int]:
        return LOCAL_RESOURCE_ERRORS

    def shed(self, model: str) -> int:
        pipeline = self._gateway._pipeline
        return pipeline.admission.shed.get(model, 0) if pipeline is not None else 0

    def hedges(self) -> tuple[int, int]:
        pipeline = self._gateway._pipeline
        if pipeline is None:
            return 0, 0
        return pipeline.hedge.hedges_sent, pipeline.hedge.hedges_won

    def load_reports(self) -> Mapping[str, int]:
        pipeline = self._gateway._pipeline
        if pipeline is None:
            return {}
        reports = pipeline.attempt.load_reports
        return {"taken": reports.taken, **reports.refused}

    def tenants(self, model: str, config: ModelConfig) -> dict[str, dict[str, int]]:
        pipeline = self._gateway._pipeline
        if pipeline is None:
            return {}
        return {seat.name: seat.to_json() for seat in pipeline.admission.share_of(model, config)}


def _topology(config: GatewayConfig, locate: Callable[[str], str | None]) -> Topology:
    """The config's names as metric labels: models' versions, pools' models, replicas' pools
    (``locate``: the pool of a replica that joined later)."""
    return Topology(
        models={name: model.version for name, model in config.models.items()},
        pools={name: pool.model for name, pool in config.pools.items()},
        replicas={r.id: name for name, pool in config.pools.items() for r in pool.replicas},
        locate=locate,
    )

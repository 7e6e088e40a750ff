"""The running gateway: config, clock, state, telemetry, upstream and pipeline in one object.

It is what the HTTP layer talks to. Start order: transport, pipeline, then the background
services (health and golden probes, fallback watchers, SLO evaluation, shared-state sync);
stop runs the other way, so no background task outlives the transport it uses. A start that
fails stops whatever it had started (no half-built gateway keeps probing). Draining (on
SIGTERM) makes every readiness answer "not ready: draining" while requests are still served.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway import __version__
from gateway.answered import answer_tape
from gateway.clock import Clock, MonotonicClock
from gateway.config.models import GatewayConfig, ModelConfig
from gateway.errors import NoReplicaAvailable, NotFound, UpstreamError
from gateway.fallback.manifest import configured_manifest
from gateway.fallback.model import FallbackModel
from gateway.fallback.watcher import FallbackWatcher
from gateway.history import HistoryRecorder
from gateway.periodic import Periodic
from gateway.pipeline.build import Pipeline, build_pipeline
from gateway.pipeline.call import InferCall, InferResult
from gateway.pipeline.fallback import FallbackRunner
from gateway.policies.budget import RetryBudget
from gateway.policies.tenant_limits import TenantLimits
from gateway.readiness import FallbackFit, Readiness, gateway_readiness, model_readiness
from gateway.rollout.wiring import rollout_ticker, rollouts_for
from gateway.shared_state import SharedState
from gateway.slo.engine import SloBook
from gateway.telemetry.metrics import ANONYMOUS, Metrics
from gateway.telemetry.model_stats import ModelStats
from gateway.telemetry.slo_metrics import slo_gauges
from gateway.telemetry.topology import Topology
from gateway.telemetry.tracing import Tracer
from gateway.upstream.departures import Departures
from gateway.upstream.discovery.watch import DiscoveryService
from gateway.upstream.events import FanoutEvents
from gateway.upstream.probes.accelerator import AcceleratorSampler
from gateway.upstream.probes.accelerator_metrics import AcceleratorCollector
from gateway.upstream.probes.accelerator_pages import page_transport
from gateway.upstream.probes.extensions import BinaryLearner
from gateway.upstream.probes.golden_prober import GoldenProber
from gateway.upstream.probes.health import HealthProber
from gateway.upstream.probes.metadata import MetadataCache, MetadataWarmer
from gateway.upstream.registry import Registry
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.dispatch import ProtocolTransport
from gateway.upstream.transport.grpc_client import GrpcTransport
from gateway.upstream.transport.http1 import Http1Transport
from gateway.upstream.transport.local_errors import LOCAL_RESOURCE_ERRORS
from gateway.v2.schema import ModelSchema
from gateway.v2.triton import triton_config
from v2proto.signature import Signature

FALLBACK_RECHECK_S = 30.0
CONFIG_TIMEOUT_S = 2.0
SLO_EVALUATE_S = 1.0


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        transport: Transport | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self.rng = rng or random.Random()
        topology = _topology(config, self._pool_of)
        self.metrics = Metrics(tenants=config.tenants, topology=topology)
        self.tenants = TenantLimits(config.tenants, self.clock)  # each tenant's own limits
        self.stats = ModelStats()  # Triton's per-model statistics, as clients saw them
        self._schemas: dict[str, ModelSchema | None] = {}
        self.tracer = tracer or Tracer(config.tracing)
        models = config.models.items()
        self.slo = SloBook(
            {n: m.slos for n, m in models},
            self.clock,
            policies={n: m.burn_policy for n, m in models},
        )
        events = FanoutEvents(self.metrics)
        self.registry = Registry(config, self.clock, events)
        self.budget = RetryBudget(config.retry_budget, self.clock)
        self.shared = SharedState(config.state, self.registry, self.slo, self.budget, self.clock)
        events.add(self.shared)
        names = sorted({m.fallback.model for m in config.models.values() if m.fallback})
        manifest = configured_manifest(config.fallback_manifest)
        self.fallback_models = {n: FallbackModel(manifest, n, self.clock) for n in names}
        self.fallbacks: dict[str, FallbackRunner] = dict(self.fallback_models)
        self.fallback_fit = FallbackFit(config.models, self.schema, self._fallback_signature)
        self.history = HistoryRecorder(  # the dashboard's last minutes and event timeline
            self.registry, self.slo, self.budget, self.fallback_models, config.models, self.clock
        )
        events.add(self.history)
        self.rollouts = rollouts_for(  # candidates beside models' pools (shared progress)
            config.models, self.clock, self.rng, self.shared, self.slo.burning, self.metrics
        )
        self.metadata = MetadataCache()
        self._transport = transport
        self._pipeline: Pipeline | None = None
        self._services: list[Any] = []
        self.accelerators: AcceleratorSampler | None = None  # pools with `accelerator:` only
        self.draining: str | None = None  # why readiness says no while requests are served
        self.answers = answer_tape(config.models, self.metrics, self.slo, self.stats,
                                   self.history, self.clock)  # fmt: skip
        self._install_scrape_hooks()

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise RuntimeError("gateway not started")
        return self._transport

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            raise RuntimeError("gateway not started")
        return self._pipeline

    async def start(self) -> None:
        """Starts everything; on any failure, stops what it started and raises."""
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        if self._transport is None:
            upstream = self.config.upstream
            http = Http1Transport(
                max_connections_per_endpoint=upstream.max_connections_per_replica,
                max_reply_header_count=upstream.max_reply_header_count,
                max_reply_header_bytes=upstream.max_reply_header_bytes,
                max_reply_body_bytes=upstream.max_reply_body_bytes,
            )
            grpc = GrpcTransport(max_reply_body_bytes=upstream.max_reply_body_bytes)
            self._transport = ProtocolTransport(http, grpc)  # grpc:// replicas: V2 gRPC
        self._pipeline = build_pipeline(
            self.registry, self._transport, self.budget, self.clock, self.rng,
            self.fallbacks, self.metrics, self.slo.current, self.config.tenants, self.rollouts,
            self.config.models,
        )  # fmt: skip
        for model in self.fallback_models.values():
            await model.verify()
        for name in self.config.models:
            self.fallback_fit.misfit(name)  # logged: declared ones; the replicas' when known
        watchers = [
            FallbackWatcher(m, self.clock, FALLBACK_RECHECK_S)
            for m in self.fallback_models.values()
        ]
        self._services = [
            HealthProber(self.registry, self._transport, self.clock, self.rng),
            GoldenProber(self.registry, self._transport, self.clock, self.rng),
            Departures(  # what a replica that left leaves behind: sockets, series, records
                self.registry, self._transport, self.metrics, (self._pipeline.vote.forget_replica,)
            ),
            DiscoveryService(self.registry, self.clock),  # after the probers: joiners get probed
            BinaryLearner(self.registry, self._transport, self.clock),  # binary_tensors unset
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
        if any(p.config.accelerator for p in self.registry.pools.values()):  # else: nothing
            pages = page_transport(p.config.accelerator for p in self.registry.pools.values())
            self.accelerators = AcceleratorSampler(
                self.registry, pages, self.clock, self.rng, self.shared, self._may_empty
            )
            self.metrics.registry.register(AcceleratorCollector(self.accelerators))
            self._services.append(self.accelerators)
        for service in self._services:
            service.start()  # a failure here: `start` stops those already started

    def drain(self, reason: str = "draining: the gateway is shutting down") -> None:
        """Readiness answers 503 with ``reason`` from now on; requests are still served."""
        self.draining = reason

    async def stop(self) -> None:
        for service in reversed(self._services):
            await service.stop()
        self._services.clear()
        if self._pipeline is not None:
            await self._pipeline.aclose()
        if self._transport is not None:
            await self._transport.aclose()
        self.tracer.shutdown()

    # --- models -------------------------------------------------------------------------

    def model(self, name: str, version: str | None = None) -> ModelConfig:
        model = self.config.models.get(name)
        if model is None:
            raise NotFound(f"model {name!r} not found")
        if version is not None and version != model.version:
            raise NotFound(f"model {name!r} has no version {version!r} (have {model.version!r})")
        return model

    def model_readiness(self, model: ModelConfig) -> Readiness:
        """Ready when enough pools have a healthy replica that is not quarantined, or a
        verified fallback can answer (`gateway.readiness`); never while draining."""
        if self.draining is not None:
            return Readiness(False, self.draining)
        refusal = self.fallback_fit.refusal(model, self._fallback_refusal)
        return model_readiness(model, self.registry.pools, refusal, self.clock.now())

    def model_ready(self, model: ModelConfig) -> bool:
        return self.model_readiness(model).ready

    def _fallback_signature(self, name: str) -> Signature | None:
        model = self.fallback_models.get(name)
        return model.signature if model is not None else None

    def _fallback_refusal(self, name: str) -> str | None:
        runner = self.fallbacks.get(name)
        if runner is None:
            return "not loaded"
        if runner.ok:
            return None
        status = self.fallback_models.get(name)
        return status.status.reason if status is not None else "not verified"

    def _may_empty(self, pool: str) -> bool:
        """Whether every model on ``pool`` has a fallback that answers (it may lose all)."""
        models = [m for m in self.config.models.values() if pool in m.pools]
        return bool(models) and all(m.fallback is not None and self._fallback_refusal(
            m.fallback.model) is None for m in models)  # fmt: skip

    def ready(self) -> bool:
        """Every model the config requires (``required``, the default) is ready."""
        return all(self.model_ready(m) for m in self.config.models.values() if m.required)

    def readiness(self) -> dict[str, Any]:
        """The ready document: overall, per model, why what is not ready is not, and why a
        fallback is refused, if one is."""
        models = self.config.models
        doc = gateway_readiness(models, {n: self.model_readiness(m) for n, m in models.items()})
        if self.draining is not None:
            doc["reason"] = self.draining
        refused = {n: m.status.reason for n, m in self.fallback_models.items() if not m.ok}
        if refused:
            doc["fallbacks_refused"] = refused
        return doc

    def infer(self, call: InferCall) -> Awaitable[InferResult]:
        """The pipeline's answer to ``call`` (its awaitable itself: a frame fewer per request)."""
        return self.pipeline.handler(call)

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
        (`Clock.now`; None: now). Recorded on `answers` (`gateway.answered`).
        """
        answer = (model, status, served_by, degraded, tenant, latency_s, deadline_s, request_bytes,
                  response_bytes, rows, self.clock.now() if at is None else at)  # fmt: skip
        self.answers.answers.append(answer)

    # --- Triton/KServe parity: repository index, model config, statistics ----------------

    def repository_index(self) -> list[dict[str, Any]]:
        """Every model clients may call, with its state (Triton's repository index)."""
        index = []
        for name, model in self.config.models.items():
            state = self.model_readiness(model)
            entry = {"name": name, "version": model.version}
            entry["state"] = "READY" if state.ready else "UNAVAILABLE"
            entry["reason"] = state.reason or ""
            index.append(entry)
        return index

    async def model_config(self, name: str, model: ModelConfig) -> dict[str, Any]:
        """A Triton replica's own configuration, renamed; else derived from the metadata."""
        pool = self.registry.pools[model.pools[0]]
        for replica in pool.healthy()[:1]:
            try:
                response = await self.transport.request(
                    replica.endpoint, "GET", pool.model_path("/config"), timeout=CONFIG_TIMEOUT_S
                )
            except UpstreamError:
                break
            if response.status == 200 and pool.dialect.native:
                with contextlib.suppress(orjson.JSONDecodeError):
                    doc = orjson.loads(response.body)
                    if isinstance(doc, dict) and "input" in doc:
                        return {**doc, "name": name}
        return triton_config(await self.model_metadata(name, model), model.max_rows)

    def statistics(self, name: str | None = None) -> dict[str, Any]:
        models = self.config.models
        chosen = {n: m.version for n, m in models.items() if name is None or n == name}
        self.answers.fold()
        return self.stats.triton(chosen)

    def schema(self, name: str) -> ModelSchema | None:
        """What requests to model ``name`` are checked against before any replica sees them:
        its declared signature, else its replicas' metadata once fetched (None: not yet, or
        it lists no inputs; the replicas check then). A dict lookup on the hot path."""
        if name in self._schemas:
            return self._schemas[name]
        model = self.config.models[name]
        if model.signature is not None:
            metadata: dict[str, Any] | None = model.signature.metadata()
        else:
            metadata = self.metadata.cached(name)
            if metadata is None:
                return None
        schema = ModelSchema.from_metadata(metadata) if metadata is not None else None
        self._schemas[name] = schema
        return schema

    async def model_metadata(self, name: str, model: ModelConfig) -> dict[str, Any]:
        """From the first of the model's pools that answers (a vote's pools in order), in the
        client's tensor names; the declared signature where the replicas list no tensors."""
        unavailable: NoReplicaAvailable | None = None
        for pool_name in model.pools:
            pool = self.registry.pools[pool_name]
            try:
                doc = await self.metadata.get(self.transport, name, model, pool)
            except NoReplicaAvailable as exc:
                unavailable = exc
                continue
            if model.signature is not None and not doc.get("inputs"):
                doc.update(model.signature.metadata())
            return doc
        assert unavailable is not None, "a model has at least one pool"
        raise unavailable

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "v2-gateway", "version": __version__, "extensions": ["binary_tensor_data"]}

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
                    replica.id, healthy=bool(replica.healthy),
                    ejected=replica.ejected_until > now, outstanding=replica.outstanding,
                )  # fmt: skip
            for pool in self.registry.pools.values():
                self.metrics.set_ejections_active(pool.name, pool.outlier.ejected_count())
            self.metrics.set_retry_budget(self.budget.balance())
            if self._pipeline is not None:
                for name in self.config.models:
                    self.metrics.set_in_flight(name, self._pipeline.admission.in_flight[name])
            self.metrics.state_store(self.shared.degraded)
            self.metrics.state_rejected(self.shared.rejects.counts)
            self.metrics.local_resource_errors(LOCAL_RESOURCE_ERRORS)
            self.metrics.set_slo(slo_gauges(self.slo.to_json()))

        self.metrics.on_scrape(refresh)


def _topology(config: GatewayConfig, locate: Callable[[str], str | None]) -> Topology:
    """The config's names as metric labels: models' versions, pools' models, replicas' pools
    (``locate``: the pool of a replica that joined later)."""
    return Topology(
        models={name: model.version for name, model in config.models.items()},
        pools={name: pool.model for name, pool in config.pools.items()},
        replicas={r.id: name for name, pool in config.pools.items() for r in pool.replicas},
        locate=locate,
    )

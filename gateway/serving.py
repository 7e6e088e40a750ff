"""What answers requests: config, registry, pipeline, and the reads a door makes of them.

Both planes build one. The control process's `gateway.control.runtime.Gateway` adds what decides
(probes, SLOs, shared state, rollouts' progress, telemetry); a data-plane worker's
(`gateway.worker.runtime`) adds the link that ships its outcomes to the control process and
applies the control's snapshots to its registry. What differs between them comes in as
arguments: the metrics the request path reports to, where upstream events go, the burn-policy
adjustment, the rollouts, where votes' dissents go. Start order: transport, pipeline, the
fallback models' verification; stop runs the other way.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from gateway import __version__
from gateway.admission.tenant_limits import TenantLimits
from gateway.call import Adjuster, InferAnswer, InferCall
from gateway.clock import Clock
from gateway.config.models import GatewayConfig, ModelConfig
from gateway.errors import NoReplicaAvailable, NotFound, UpstreamError
from gateway.fallback.manifest import configured_manifest
from gateway.fallback.model import FallbackModel
from gateway.pipeline.audit import AuditSink
from gateway.pipeline.build import Pipeline, build_pipeline
from gateway.pipeline.fallback import FallbackRunner
from gateway.pipeline.reactions import Reactions
from gateway.readiness import FallbackFit, Readiness, gateway_readiness, model_readiness
from gateway.retry.budget import RetryBudget
from gateway.rollout.controller import Rollouts
from gateway.telemetry.metrics import RequestMetrics
from gateway.telemetry.tracing import Tracer
from gateway.upstream.events import UpstreamEvents
from gateway.upstream.probes.metadata import MetadataCache
from gateway.upstream.registry import Registry
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.dispatch import ProtocolTransport
from gateway.upstream.transport.http1 import Http1Transport
from gateway.v2.schema import ModelSchema
from gateway.v2.triton import triton_config
from gateway.voting.quarantine import DissentSink, Suspects
from v2proto.signature import Signature

CONFIG_TIMEOUT_S = 2.0


class Serving:
    def __init__(
        self,
        config: GatewayConfig,
        clock: Clock,
        rng: random.Random,
        tracer: Tracer,
        metrics: RequestMetrics,
        events: UpstreamEvents,
        adjust: Adjuster,
        transport: Transport | None = None,
    ) -> None:
        """``metrics``: what the request path reports to; ``events``: where the registry's
        breaker transitions, ejections and quarantines go; ``adjust``: a model's burn-policy
        adjustment now. The subclass sets `rollouts` (and may set `suspects`, `audits` and
        `escalated`) before `start`."""
        self.config = config
        # read on every request: a plain attribute (each read of a config goes through a
        # pydantic model's ``__getattr__`` hook)
        self._models = config.models
        self.clock = clock
        self.rng = rng
        self.tracer = tracer
        self.metrics = metrics
        self.adjust = adjust
        # each tenant's own limits
        self.tenants = TenantLimits(config.tenants, clock)
        self.registry = Registry(config, clock, events)
        self.budget = RetryBudget(config.retry_budget, clock)
        self.suspects: DissentSink = Suspects(self.registry)
        self.rollouts: Rollouts | None = None
        # None: every reaction here (`Reactions`)
        self.reactions: Reactions | None = None
        # where audits' verdicts go (None: no audits)
        self.audits: AuditSink | None = None
        # the models the burn policy serves by a vote now (model -> why), kept in place by
        # whoever decides (the SLO book here, the snapshot mirror in a worker)
        self.escalated: Mapping[str, str] = {}
        names = sorted({m.fallback.model for m in config.models.values() if m.fallback})
        manifest = configured_manifest(config.fallback_manifest)
        self.fallback_models = {n: FallbackModel(manifest, n, clock) for n in names}
        self.fallbacks: dict[str, FallbackRunner] = dict(self.fallback_models)
        self.fallback_fit = FallbackFit(config.models, self.schema, self._fallback_signature)
        self.metadata = MetadataCache()
        self._schemas: dict[str, ModelSchema | None] = {}
        self._transport = transport
        self._pipeline: Pipeline | None = None
        # why readiness says no while requests are served
        self.draining: str | None = None

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

    async def start_serving(self) -> None:
        """The transport, the pipeline, the fallback models verified."""
        if self._transport is None:
            upstream = self.config.upstream
            http = Http1Transport(
                max_connections_per_endpoint=upstream.max_connections_per_replica,
                max_reply_header_count=upstream.max_reply_header_count,
                max_reply_header_bytes=upstream.max_reply_header_bytes,
                max_reply_body_bytes=upstream.max_reply_body_bytes,
            )
            # grpc:// replicas: V2 gRPC
            self._transport = ProtocolTransport(
                http, _grpc_transport(upstream.max_reply_body_bytes)
            )
        self._pipeline = build_pipeline(
            self.registry,
            self._transport,
            self.budget,
            self.clock,
            self.rng,
            self.fallbacks,
            self.metrics,
            self.adjust,
            self.config.tenants,
            self.rollouts,
            self.config.models,
            self.suspects,
            self.reactions,
            self.audits,
            self.escalated,
        )
        for model in self.fallback_models.values():
            await model.verify()
        for name in self.config.models:
            # logged: declared ones; the replicas' when known
            self.fallback_fit.misfit(name)

    async def stop_serving(self) -> None:
        if self._pipeline is not None:
            await self._pipeline.aclose()
        if self._transport is not None:
            await self._transport.aclose()
        self.tracer.shutdown()

    def drain(self, reason: str = "draining: the gateway is shutting down") -> None:
        """Readiness answers 503 with ``reason`` from now on; requests are still served."""
        self.draining = reason

    # --- models -------------------------------------------------------------------------

    def model(self, name: str, version: str | None = None) -> ModelConfig:
        model = self._models.get(name)
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
        refusal = self.fallback_fit.refusal(model, self.fallback_refusal)
        return model_readiness(model, self.registry.pools, refusal, self.clock.now())

    def model_ready(self, model: ModelConfig) -> bool:
        return self.model_readiness(model).ready

    def _fallback_signature(self, name: str) -> Signature | None:
        model = self.fallback_models.get(name)
        return model.signature if model is not None else None

    def fallback_refusal(self, name: str) -> str | None:
        """Why fallback model ``name`` cannot answer now (None: it can)."""
        runner = self.fallbacks.get(name)
        if runner is None:
            return "not loaded"
        if runner.ok:
            return None
        status = self.fallback_models.get(name)
        return status.status.reason if status is not None else "not verified"

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

    def infer(self, call: InferCall) -> Awaitable[InferAnswer]:
        """The pipeline's answer to ``call`` (its awaitable itself: a frame fewer per request;
        the pipeline read without the `pipeline` property's call, for the same reason)."""
        pipeline = self._pipeline
        if pipeline is None:
            raise RuntimeError("gateway not started")
        return pipeline.handler(call)

    # --- Triton/KServe parity: repository index, model config -----------------------------

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


def _grpc_transport(max_reply_body_bytes: int) -> Callable[[], Transport]:
    """What makes the gRPC transport, imported only then (`ProtocolTransport`)."""

    def make() -> Transport:
        from gateway.upstream.transport.grpc_client import GrpcTransport

        return GrpcTransport(max_reply_body_bytes=max_reply_body_bytes)

    return make

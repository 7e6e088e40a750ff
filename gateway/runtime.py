"""The running gateway: config, clock, registry, transport, prober and pipeline in one object.

It is what the HTTP layer talks to. Start/stop order lives here: transport first, then probes;
probes stop before the transport closes.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from gateway import __version__
from gateway.clock import Clock, MonotonicClock
from gateway.config.models import GatewayConfig, ModelConfig
from gateway.errors import NoReplicaAvailable, NotFound, UpstreamError
from gateway.fallback.model import FallbackModel
from gateway.fallback.watcher import FallbackWatcher
from gateway.pipeline.build import Pipeline, build_pipeline
from gateway.pipeline.call import InferCall, InferResult
from gateway.pipeline.fallback import FallbackRunner
from gateway.policies.budget import RetryBudget
from gateway.upstream.golden_prober import GoldenProber
from gateway.upstream.health import HealthProber
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.transport import Transport
from gateway.upstream.transports import TransportLimits, make_transport

METADATA_TIMEOUT_S = 2.0
FALLBACK_RECHECK_S = 30.0


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        transport: Transport | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self.rng = rng or random.Random()
        self.registry = Registry(config, self.clock)
        self.budget = RetryBudget(config.retry_budget, self.clock)
        self._transport = transport
        self._prober: HealthProber | None = None
        self._pipeline: Pipeline | None = None
        self._metadata: dict[str, dict[str, Any]] = {}
        self._golden: GoldenProber | None = None
        names = sorted({m.fallback.model for m in config.models.values() if m.fallback})
        manifest = Path(config.fallback_manifest)
        self.fallback_models = {n: FallbackModel(manifest, n, self.clock) for n in names}
        self.fallbacks: dict[str, FallbackRunner] = dict(self.fallback_models)
        self._watchers = [
            FallbackWatcher(m, self.clock, FALLBACK_RECHECK_S)
            for m in self.fallback_models.values()
        ]

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise RuntimeError("gateway not started")
        return self._transport

    async def start(self) -> None:
        if self._transport is None:
            limits = TransportLimits(
                max_connections_per_endpoint=self.config.server.max_connections_per_replica
            )
            self._transport = make_transport(self.config.server.transport, limits)
        self._pipeline = build_pipeline(
            self.registry, self._transport, self.budget, self.clock, self.rng, self.fallbacks
        )
        self._prober = HealthProber(self.registry, self._transport, self.clock, self.rng)
        self._prober.start()
        self._golden = GoldenProber(self.registry, self._transport, self.clock, self.rng)
        self._golden.start()
        for model in self.fallback_models.values():
            await model.verify()
        for watcher in self._watchers:
            watcher.start()

    async def stop(self) -> None:
        for watcher in self._watchers:
            await watcher.stop()
        if self._golden is not None:
            await self._golden.stop()
        if self._prober is not None:
            await self._prober.stop()
        if self._pipeline is not None:
            await self._pipeline.attempt.aclose()
        if self._transport is not None:
            await self._transport.aclose()

    # --- models -------------------------------------------------------------------------

    def model(self, name: str, version: str | None = None) -> ModelConfig:
        model = self.config.models.get(name)
        if model is None:
            raise NotFound(f"model {name!r} not found")
        if version is not None and version != model.version:
            raise NotFound(f"model {name!r} has no version {version!r} (have {model.version!r})")
        return model

    def pool_of(self, model: ModelConfig) -> Pool:
        """The pool that answers metadata for the model (a vote's first pool)."""
        return self.registry.pools[model.pools[0]]

    def model_ready(self, model: ModelConfig) -> bool:
        """Ready when enough pools have a healthy replica, or a verified fallback can answer."""
        live = sum(1 for name in model.pools if self.registry.pools[name].healthy())
        needed = model.vote.quorum if model.vote is not None else 1
        return live >= needed or self._fallback_ready(model)

    def _fallback_ready(self, model: ModelConfig) -> bool:
        if model.fallback is None:
            return False
        runner = self.fallbacks.get(model.fallback.model)
        return runner is not None and runner.ok

    def ready(self) -> bool:
        return all(self.model_ready(m) for m in self.config.models.values())

    def readiness(self) -> dict[str, Any]:
        """The ready document: overall, per model, and why a fallback is refused, if one is."""
        doc: dict[str, Any] = {
            "ready": self.ready(),
            "models": {n: self.model_ready(m) for n, m in self.config.models.items()},
        }
        refused = {n: m.status.reason for n, m in self.fallback_models.items() if not m.ok}
        if refused:
            doc["fallbacks_refused"] = refused
        return doc

    async def infer(self, call: InferCall) -> InferResult:
        assert self._pipeline is not None, "gateway not started"
        return await self._pipeline.handler(call)

    async def model_metadata(self, name: str, model: ModelConfig) -> dict[str, Any]:
        """The replicas' metadata for the model, renamed to what the client calls it."""
        cached = self._metadata.get(name)
        if cached is not None:
            return cached
        pool = self.pool_of(model)
        candidates = pool.healthy() or list(pool.replicas)
        last = "no replica answered"
        for replica in candidates:
            try:
                response = await self.transport.request(
                    replica.endpoint, "GET", pool.model_path(), timeout=METADATA_TIMEOUT_S
                )
            except UpstreamError as exc:
                last = f"{replica.id}: {exc.message}"
                continue
            if response.status != 200:
                last = f"{replica.id} answered {response.status}"
                continue
            try:
                metadata = orjson.loads(response.body)
            except orjson.JSONDecodeError:
                last = f"{replica.id} sent metadata that is not JSON"
                continue
            metadata.update(name=name, versions=[model.version])
            self._metadata[name] = metadata
            return dict(metadata)
        raise NoReplicaAvailable(f"model {name!r}: metadata unavailable ({last})")

    def server_metadata(self) -> dict[str, Any]:
        return {"name": "v2-gateway", "version": __version__, "extensions": ["binary_tensor_data"]}

    def state(self) -> dict[str, Any]:
        admission = self._pipeline.admission if self._pipeline else None
        hedge = self._pipeline.hedge if self._pipeline else None
        return {
            "ready": self.ready(),
            "transport": self.config.server.transport,
            "retry_budget": self.budget.snapshot(),
            "fallbacks": {n: m.status.to_json() for n, m in self.fallback_models.items()},
            "suspects": self._pipeline.vote.suspects_snapshot() if self._pipeline else {},
            "hedges": {
                "sent": hedge.hedges_sent if hedge else 0,
                "won": hedge.hedges_won if hedge else 0,
            },
            "models": {
                name: {
                    "route": m.route,
                    "pools": list(m.pools),
                    "version": m.version,
                    "ready": self.model_ready(m),
                    "in_flight": admission.in_flight.get(name, 0) if admission else 0,
                    "max_in_flight": m.admission.max_in_flight,
                    "shed": admission.shed.get(name, 0) if admission else 0,
                }
                for name, m in self.config.models.items()
            },
            "pools": self.registry.snapshot(),
        }

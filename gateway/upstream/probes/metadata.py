"""Model metadata from the replicas, in what the client calls the model and its tensors, cached.

Metadata rarely changes and clients (tritonclient) ask for it before inferring, so the first
replica that answers is remembered per client-facing model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.errors import GatewayError, NoReplicaAvailable, UpstreamError
from gateway.faults.classify import classify_error
from gateway.periodic import BackgroundTask
from gateway.upstream.registry import Pool
from gateway.upstream.transport.base import Transport

METADATA_TIMEOUT_S = 2.0
WARM_RETRY_S = 2.0


class MetadataCache:
    """Bounded by count: one entry per model of the config (the names come from the config,
    never from a request), each a replica's answer within the reply cap."""

    def __init__(self) -> None:
        self._cache: dict[str, dict[str, Any]] = {}

    def cached(self, name: str) -> dict[str, Any] | None:
        """The metadata already fetched for ``name`` (no I/O), or None."""
        return self._cache.get(name)

    def put(self, name: str, metadata: dict[str, Any]) -> None:
        """Metadata fetched elsewhere (a data-plane worker's, from its control process)."""
        self._cache[name] = metadata

    async def get(
        self, transport: Transport, name: str, model: ModelConfig, pool: Pool
    ) -> dict[str, Any]:
        cached = self._cache.get(name)
        if cached is not None:
            return dict(cached)
        last = "no replica answered"
        for replica in pool.healthy() or list(pool.replicas):
            try:
                response = await transport.request(
                    replica.endpoint, "GET", pool.model_path(), timeout=METADATA_TIMEOUT_S
                )
            except UpstreamError as exc:
                # no replica's text
                last = classify_error(replica.id, exc, 0.0).summary()
                continue
            if response.status != 200:
                last = f"replica {replica.id} answered {response.status}"
                continue
            try:
                metadata = orjson.loads(response.body)
            except orjson.JSONDecodeError:
                last = f"{replica.id} sent metadata that is not JSON"
                continue
            if not isinstance(metadata, dict):
                last = f"{replica.id} sent metadata that is not an object"
                continue
            metadata = pool.dialect.client_metadata(metadata)
            metadata.update(name=name, versions=[model.version])
            self._cache[name] = metadata
            return dict(metadata)
        raise NoReplicaAvailable(f"model {name!r}: metadata unavailable ({last})")


class MetadataWarmer(BackgroundTask):
    """Fetches each model's metadata soon after start, retrying until one replica answers, so
    requests are checked against the signature (`gateway.v2.schema`) from their first
    minute; a request never waits for it (until then the replicas check)."""

    def __init__(
        self,
        names: Sequence[str],
        fetch: Callable[[str], Awaitable[object]],
        clock: Clock,
        retry_s: float = WARM_RETRY_S,
    ) -> None:
        super().__init__("metadata-warmer")
        self._names, self._fetch, self._clock, self._retry_s = list(names), fetch, clock, retry_s

    async def _run(self) -> None:
        waiting = list(self._names)
        while waiting:
            for name in list(waiting):
                try:
                    await self._fetch(name)
                except GatewayError:
                    continue
                waiting.remove(name)
            if waiting:
                await self._clock.sleep(self._retry_s)

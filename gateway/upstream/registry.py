"""Pools of replicas built from config: the gateway's view of what exists upstream.

A `Pool` owns its `Replica` objects; the `Registry` maps pool names to pools and replica ids to
replicas so probes, admin endpoints and the request path share the very same state objects.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from gateway.config.models import GatewayConfig, PoolConfig
from gateway.upstream.replica import Replica


@dataclass(slots=True)
class Pool:
    name: str
    config: PoolConfig
    replicas: tuple[Replica, ...]

    @classmethod
    def from_config(cls, name: str, config: PoolConfig) -> Pool:
        return cls(name, config, tuple(Replica.from_config(name, r) for r in config.replicas))

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def version(self) -> str | None:
        return self.config.version

    def model_path(self, suffix: str = "") -> str:
        """The replica-side V2 path for this pool's model, e.g. ``/v2/models/m/versions/1/infer``."""
        path = f"/v2/models/{self.model}"
        if self.version is not None:
            path += f"/versions/{self.version}"
        return path + suffix

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def snapshot(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "version": self.version,
            "healthy": len(self.healthy()),
            "size": len(self.replicas),
            "replicas": [r.snapshot() for r in self.replicas],
        }


class Registry:
    def __init__(self, config: GatewayConfig) -> None:
        self.pools = {name: Pool.from_config(name, pool) for name, pool in config.pools.items()}

    def replicas(self) -> Iterator[Replica]:
        for pool in self.pools.values():
            yield from pool.replicas

    def snapshot(self) -> list[dict[str, Any]]:
        return [pool.snapshot() for pool in self.pools.values()]

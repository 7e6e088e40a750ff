"""What the config names, as metric labels: each model's version, each pool's model, each
replica's pool.

Replica-level events arrive with a replica id only (breaker listeners, ejections); the labels
``model`` and ``pool`` come from here, so they are bounded by the config, never by traffic.
A replica that joins while serving (DNS discovery) is looked up once with ``locate`` and
remembered. Plain mappings, not the config's types: telemetry sits below the config layer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field


def _nowhere(replica: str) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class Topology:
    # model -> its version
    models: Mapping[str, str] = field(default_factory=dict)
    # pool -> the model it serves
    pools: Mapping[str, str] = field(default_factory=dict)
    # replica id -> its pool
    replicas: dict[str, str] = field(default_factory=dict)
    # the pool of a replica not in `replicas`
    locate: Callable[[str], str | None] = _nowhere

    def version(self, model: str) -> str:
        """The model's version; "" (no label value) for a model the config does not name."""
        return self.models.get(model, "")

    def pool_labels(self, pool: str) -> tuple[str, str]:
        """``(model, pool)``: the labels of a pool series."""
        return self.pools.get(pool, ""), pool

    def replica_labels(self, replica: str) -> tuple[str, str, str]:
        """``(model, pool, replica)``: the labels of every replica series (`catalog.REPLICA`)."""
        pool = self.replicas.get(replica)
        if pool is None:
            pool = self.locate(replica)
            if pool is None:
                # not known (yet): asked again next time
                return "", "", replica
            self.replicas[replica] = pool
        return self.pools.get(pool, ""), pool, replica

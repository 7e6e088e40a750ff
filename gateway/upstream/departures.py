"""What a replica leaves behind when it leaves: its idle connections and its metric series.

Replicas leave while the gateway serves: DNS discovery drains the ones gone from the answer
(every rolling update of a Deployment replaces all of its pods, and so all of their addresses).
The probers stop on `Registry.release`; this watcher does the rest, so that a gateway that sees
churn for months keeps neither the departed replicas' sockets (up to the transport's idle limit
each) nor their series on `/metrics` (a cardinality that would grow with every rollout). What is
still shared with a replica that stays (the same id or address in another pool) is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gateway.telemetry.metrics import Metrics
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import Transport


class Departures:
    """A `MembershipWatcher`: releases what the gateway kept for a replica that left."""

    def __init__(
        self,
        registry: Registry,
        transport: Transport,
        metrics: Metrics,
        also: Iterable[Callable[[str], None]] = (),
    ) -> None:
        """``also``: more holders of per-replica state, told a departed replica's id (the
        vote's suspect records live above this layer)."""
        self._registry = registry
        self._transport = transport
        self._metrics = metrics
        self._also = tuple(also)

    def start(self) -> None:
        self._registry.watch(self)

    async def stop(self) -> None:
        self._registry.unwatch(self)

    def joined(self, pool: Pool, replica: Replica) -> None:
        """Nothing to do: connections and series are made on first use."""

    def left(self, pool: Pool, replica: Replica) -> None:
        staying = [
            other
            for each in self._registry.pools.values()
            for other in (*each.replicas, *each.draining)
            if other is not replica
        ]
        if all(other.id != replica.id for other in staying):
            self._metrics.forget_replica(replica.id)
            for forget in self._also:
                forget(replica.id)
        if all(other.endpoint != replica.endpoint for other in staying):
            self._transport.forget(replica.endpoint)

"""Pools of replicas built from config: the gateway's view of what exists upstream.

A `Pool` owns its `Replica` objects, their breakers, its outlier detector and latency window;
the `Registry` maps pool names to pools so probes, admin endpoints and the request path share
the very same state objects.

Membership may change while serving (DNS discovery): `Pool.replicas` is then replaced by a new
tuple in one step (no await between reading and writing it), so every reader iterates a
consistent set. A removed replica is *draining*: out of `replicas` at once (no new attempts),
kept in `draining` while its in-flight attempts finish on the same object, then released.
Watchers (the health prober) hear of each replica that joins or leaves. An operator's drain or
eject (`gateway.upstream.controls`) uses the same drain, and ``paused`` says why a paused pool
takes no traffic.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.clock import Clock
from gateway.config.models import GatewayConfig
from gateway.config.pool import PoolConfig
from gateway.config.replica import ReplicaConfig
from gateway.faults.record import FaultRecord
from gateway.upstream.breaker import ReplicaBreaker, StateListener
from gateway.upstream.eligibility import in_panic
from gateway.upstream.events import NullEvents, UpstreamEvents
from gateway.upstream.latency import LatencyWindow
from gateway.upstream.outlier import OutlierDetector
from gateway.upstream.replica import Replica
from gateway.upstream.saturation import saturation
from gateway.v2.dialect import Dialect

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Pool:
    name: str
    config: PoolConfig
    replicas: tuple[Replica, ...]
    outlier: OutlierDetector
    # its error streak and refused inputs, for the fault judge
    record: FaultRecord
    latency: LatencyWindow = field(default_factory=LatencyWindow)
    # its tensor names, binary or not
    dialect: Dialect = field(default_factory=Dialect)
    # removed, their in-flight attempts still finishing
    draining: tuple[Replica, ...] = ()
    # DNS discovery's last answer: what it left out
    discovery: dict[str, Any] | None = None
    # an operator's pause: why no replica of it is eligible
    paused: str | None = None
    # ids an operator drained or ejected: no rejoining
    held: frozenset[str] = frozenset()
    # ``model_path("/infer")``, which every attempt sends to
    infer_path: str = field(init=False)
    # What every attempt reads of the config, copied once: each attribute read on a pydantic
    # model goes through its ``__getattr__`` hook, never the interpreter's specialised read
    # ``config.load_aware``
    load_aware: bool = field(init=False)
    # ``config.load.stale_s``
    load_stale_s: float = field(init=False)
    # ``config.echoes_id``
    echoes_id: bool = field(init=False)
    # ``config.panic_threshold_percent / 100``
    panic_share: float = field(init=False)

    def __post_init__(self) -> None:
        self.infer_path = self.model_path("/infer")
        config = self.config
        self.load_aware = config.load_aware
        self.load_stale_s = config.load.stale_s
        self.echoes_id = config.echoes_id
        self.panic_share = config.panic_threshold_percent / 100

    @classmethod
    def from_config(
        cls, name: str, config: PoolConfig, clock: Clock, events: UpstreamEvents
    ) -> Pool:
        listeners: tuple[StateListener, ...] = (events.breaker_transition,)
        replicas = tuple(
            Replica.from_config(
                name, r, ReplicaBreaker(r.id, config.breaker, clock, listeners), config.endpoint(r)
            )
            for r in config.replicas
        )
        if config.tls is not None and not config.tls.verify:
            log.warning(
                "pool %s: TLS certificates of its replicas are NOT verified (tls.verify: false); "
                "anyone on the path can impersonate them",
                name,
            )
        outlier = OutlierDetector(replicas, config.outlier, clock, events)
        dialect = Dialect(config.tensors, config.binary_tensors)
        return cls(name, config, replicas, outlier, FaultRecord(clock), dialect=dialect)

    @property
    def model(self) -> str:
        return self.config.model

    @property
    def version(self) -> str | None:
        return self.config.version

    def model_path(self, suffix: str = "") -> str:
        """The replica-side V2 path of this pool's model, e.g. ``/v2/models/m/versions/1/ready``."""
        path = f"/v2/models/{self.model}"
        if self.version is not None:
            path += f"/versions/{self.version}"
        return path + suffix

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def add(self, replica: Replica) -> None:
        """``replica`` joins (or, if it was draining, rejoins) the pool."""
        self.draining = tuple(r for r in self.draining if r is not replica)
        self._members((*self.replicas, replica))

    def drain(self, replica_id: str) -> Replica | None:
        """Takes the replica out of eligibility now; its attempts in flight go on. None: not
        a member."""
        replica = next((r for r in self.replicas if r.id == replica_id), None)
        if replica is not None:
            self.draining = (*self.draining, replica)
            self._members(tuple(r for r in self.replicas if r is not replica))
        return replica

    def release(self, replica: Replica) -> bool:
        """A drained replica leaves for good; False if it is not draining (it rejoined)."""
        if replica not in self.draining:
            return False
        self.draining = tuple(r for r in self.draining if r is not replica)
        return True

    def _members(self, replicas: tuple[Replica, ...]) -> None:
        self.replicas = replicas
        self.outlier.track(replicas)

    def snapshot(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "version": self.version,
            "healthy": len(self.healthy()),
            "size": len(self.replicas),
            "panic": in_panic(self, now),
            "load_aware": self.config.load_aware,
            "saturated": saturation(self, now) is not None,
            "paused": self.paused,
            "ejected": self.outlier.ejected_count(),
            "replicas": [r.snapshot(now) for r in self.replicas],
            "draining": [r.snapshot(now) for r in self.draining],
            # as sent now: learned or configured
            "binary_tensors": self.dialect.binary_tensors,
            "tls": self.config.tls.snapshot() if self.config.tls else None,
            # names only, never values
            "headers": dict.fromkeys(self.config.headers, "***"),
            "discovery": self.discovery,
        }


class MembershipWatcher(Protocol):
    def joined(self, pool: Pool, replica: Replica) -> None: ...

    def left(self, pool: Pool, replica: Replica) -> None: ...


class Registry:
    def __init__(
        self, config: GatewayConfig, clock: Clock, events: UpstreamEvents | None = None
    ) -> None:
        self._clock = clock
        self.events: UpstreamEvents = events or NullEvents()
        self.pools = {
            name: Pool.from_config(name, pool, clock, self.events)
            for name, pool in config.pools.items()
        }
        self._watchers: list[MembershipWatcher] = []

    def watch(self, watcher: MembershipWatcher) -> None:
        self._watchers.append(watcher)

    def unwatch(self, watcher: MembershipWatcher) -> None:
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def add(self, pool: Pool, config: ReplicaConfig) -> Replica:
        """A new replica in ``pool``, held out (unhealthy) until its first probe passes, as in
        Envoy; a draining one with that id rejoins as it is, with what it had learned, unless
        an operator holds it (``Pool.held``)."""
        replica = next((r for r in pool.draining if r.id == config.id), None)
        rejoined = replica is not None
        if replica is not None and replica.id in pool.held:
            # DNS still lists it, but an operator holds it out: it stays so
            return replica
        if replica is None:
            listeners: tuple[StateListener, ...] = (self.events.breaker_transition,)
            breaker = ReplicaBreaker(config.id, pool.config.breaker, self._clock, listeners)
            replica = Replica.from_config(pool.name, config, breaker, pool.config.endpoint(config))
            replica.mark_health(False)
        pool.add(replica)
        if not rejoined:
            for watcher in list(self._watchers):
                watcher.joined(pool, replica)
        return replica

    def drain(self, pool: Pool, replica_id: str) -> Replica | None:
        """No new attempts for the replica from now on (see `Pool.drain`)."""
        return pool.drain(replica_id)

    def release(self, pool: Pool, replica: Replica) -> bool:
        """A drained replica leaves; its watchers (probes) stop. False: it rejoined meanwhile."""
        if not pool.release(replica):
            return False
        for watcher in list(self._watchers):
            watcher.left(pool, replica)
        return True

    def quarantine(self, replica: Replica, duration_s: float, reason: str, kind: str) -> bool:
        """Quarantines ``replica`` (wrong answers) and reports it once; False if it already was."""
        if not replica.quarantine(self._clock.now(), duration_s, reason):
            return False
        self.events.quarantine(replica.id, kind)
        log.warning("replica %s quarantined for %.0f s: %s", replica.id, duration_s, reason)
        return True

    def replica(self, replica_id: str) -> Replica | None:
        return next((r for r in self.replicas() if r.id == replica_id), None)

    def replicas(self) -> Iterator[Replica]:
        for pool in self.pools.values():
            yield from pool.replicas

    def snapshot(self) -> list[dict[str, Any]]:
        now = self._clock.now()
        return [pool.snapshot(now) for pool in self.pools.values()]

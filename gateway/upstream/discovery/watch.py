"""DNS discovery: a pool's replicas follow what its name resolves to, re-resolved periodically.

Each pool with `discovery` config gets one loop: resolve (`gateway.upstream.discovery.dns`),
work out the change against the pool's members (`plan`, a pure function), add the new replicas
(health unknown, probed before they take traffic) and drain the gone ones: out of eligibility at
once, their in-flight attempts finish (``outstanding`` reaches 0, or ``drain_timeout_s``
passes), then their probes stop and they leave. A failed resolution keeps the last good set (one
WARNING per failure spell), and an empty answer never empties the pool unless ``allow_empty``: a
DNS hiccup must not take every replica away from a serving gateway.

An answer is screened first (`screen`): addresses no replica can have (unspecified, multicast,
broadcast, reserved, SRV's port 0) and records of names not asked about are dropped, and at
most ``max_members`` targets are kept (`cap`: the best SRV priorities, members already in the
pool first): one hostile answer of 3,900 records must not make 3,900 replicas. What was left
out, and why, is logged when it changes and shown in the pool's ``discovery`` in /admin/state.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import socket
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock
from gateway.config.discovery import DiscoveryConfig
from gateway.config.replica import ReplicaConfig
from gateway.upstream.discovery.dns import Dropped, ResolutionFailed, Resolver, Target, resolver_for
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)
# how often a draining replica's outstanding attempts are looked at
DRAIN_POLL_S = 0.05
# dropped addresses listed in a log line and in /admin/state (the rest counted)
SHOWN = 20
BROADCAST = b"\xff\xff\xff\xff"
# ::ffff:a.b.c.d
V4_MAPPED = b"\x00" * 10 + b"\xff\xff"


@dataclass(frozen=True, slots=True)
class Change:
    add: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.remove)


def plan(current: Collection[str], wanted: Collection[str], *, allow_empty: bool) -> Change:
    """Which replica ids join and which leave; an empty ``wanted`` changes nothing unless
    ``allow_empty`` (DNS said "none": more often a glitch than an intent)."""
    if not wanted and not allow_empty:
        return Change()
    return Change(
        add=tuple(sorted(set(wanted) - set(current))),
        remove=tuple(sorted(set(current) - set(wanted))),
    )


def replica_id(pool: str, target: Target) -> str:
    """Deterministic, so every gateway names a replica alike (shared breaker state agrees),
    and without its address, which an id carries to clients (``x-served-by``, errors) while
    the address stays in the keyed /admin/state: ``<pool>-<digest>``, 10 hex digits of a
    BLAKE2b digest of the pool, address and port (a name, not a secret)."""
    digest = hashlib.blake2b(
        f"{pool}|{target.host}|{target.port}".encode(), digest_size=5
    ).hexdigest()
    return f"{pool}-{digest}"


def unusable(target: Target) -> str | None:
    """Why no replica can listen on ``target`` (None: one can). Loopback is fine (a sidecar).

    Read from the packed address, not `ipaddress`, whose objects cost too much for an answer of
    thousands of records on the event loop (docs/measured.md)."""
    if target.port == 0:
        return "port 0 (in SRV: no such service here)"
    packed = _packed(target.host)
    if len(packed) == 16:
        if packed[:12] == V4_MAPPED:
            packed = packed[12:]
        elif packed[0] == 0xFF:
            return "a multicast address"
    if not any(packed):
        return "the unspecified address"
    if len(packed) == 4 and packed == BROADCAST:
        return "the broadcast address"
    if len(packed) == 4 and 224 <= packed[0] < 240:
        return "a multicast address"
    if len(packed) == 4 and packed[0] >= 240:
        return "a reserved address (240.0.0.0/4)"
    return None


def screen(targets: Iterable[Target]) -> tuple[list[Target], list[Dropped]]:
    """The targets a replica can have, and the others with the reason."""
    usable, dropped = [], []
    for target in targets:
        reason = unusable(target)
        if reason is None:
            usable.append(target)
        else:
            dropped.append(Dropped(_where(target), reason))
    return usable, dropped


def cap(targets: Iterable[Target], members: Collection[str], pool: str, limit: int) -> list[Target]:
    """At most ``limit`` targets: the lowest SRV priorities, within one the pool's ``members``
    first (a long answer must not churn who serves), then by address."""
    ranked = sorted(
        targets,
        key=lambda t: (t.priority, replica_id(pool, t) not in members, _packed(t.host), t.port),
    )
    return ranked[:limit]


def _packed(host: str) -> bytes:
    """An IP address's bytes (4 or 16); an IPv6 zone (``%eth0``) is not part of them."""
    address = host.partition("%")[0]
    return socket.inet_pton(socket.AF_INET6 if ":" in address else socket.AF_INET, address)


def _where(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return f"{host}:{target.port}"


def replica_configs(
    pool: str, targets: Iterable[Target], config: DiscoveryConfig, scheme: str
) -> dict[str, ReplicaConfig]:
    """The replicas ``targets`` stand for, by id; ``scheme`` is https where the pool has TLS.

    SRV priorities (RFC 2782: use the lowest-numbered priority; the others only when those
    fail): the targets of the lowest priority are the pool's actives, the others its standby
    replicas (hot spares, used while an active is down, see `eligibility`).
    """
    targets = list(targets)
    best = min((t.priority for t in targets), default=0)
    replicas = {}
    for target in targets:
        host = target.host
        if ipaddress.ip_address(host).version == 6:
            host = f"[{host}]"
        rid = replica_id(pool, target)
        replicas[rid] = ReplicaConfig(
            id=rid,
            url=f"{scheme}://{host}:{target.port}",
            zone=config.zone,
            standby=target.priority > best,
        )
    return replicas


class PoolDiscovery:
    """One pool's resolve-and-reconcile loop."""

    def __init__(
        self,
        registry: Registry,
        pool: Pool,
        config: DiscoveryConfig,
        resolver: Resolver,
        clock: Clock,
    ) -> None:
        self._registry = registry
        self._pool = pool
        self._config = config
        self._resolver = resolver
        self._clock = clock
        self._scheme = "https" if pool.config.tls is not None else "http"
        # in a failure spell (logged once)
        self._failing = False
        # answers over max_members (logged once per spell)
        self._over_cap = False
        # the last answer's (logged when it changes)
        self._dropped: tuple[Dropped, ...] = ()
        self._drains: dict[str, asyncio.Task[None]] = {}
        pool.discovery = self.status(0, 0)

    @property
    def pool(self) -> str:
        return self._pool.name

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self.refresh()
                except Exception:
                    # a bug must not freeze the pool's membership for good
                    log.exception("pool %s: discovery failed", self._pool.name)
                await self._clock.sleep(self._config.interval_s)
        finally:
            for task in self._drains.values():
                task.cancel()

    async def refresh(self) -> Change:
        """Resolves once and applies the change; the change made (empty on failure)."""
        try:
            answer = await self._resolver.resolve(self._config)
        except ResolutionFailed as exc:
            self._pool.discovery = {**(self._pool.discovery or {}), "last_error": str(exc)}
            if not self._failing:
                log.warning(
                    "pool %s: resolving %s failed, keeping its %d replica(s): %s",
                    self._pool.name,
                    self._config.dns,
                    len(self._pool.replicas),
                    exc,
                )
            self._failing = True
            return Change()
        if self._failing:
            log.warning("pool %s: resolving %s works again", self._pool.name, self._config.dns)
            self._failing = False
        usable, dropped = screen(answer.targets)
        members = {r.id for r in self._pool.replicas}
        targets = cap(usable, members, self._pool.name, self._config.max_members)
        self._left_out((*answer.dropped, *dropped), len(usable) - len(targets))
        self._pool.discovery = self.status(
            len(answer.targets) + len(answer.dropped), len(usable) - len(targets)
        )
        wanted = replica_configs(self._pool.name, targets, self._config, self._scheme)
        if not wanted and self._pool.replicas and not self._config.allow_empty:
            log.warning(
                "pool %s: %s resolved to nothing; keeping the last %d replica(s)",
                self._pool.name,
                self._config.dns,
                len(self._pool.replicas),
            )
        change = plan(
            [r.id for r in self._pool.replicas], wanted, allow_empty=self._config.allow_empty
        )
        self.apply(change, wanted)
        return change

    def status(self, answered: int, over_cap: int) -> dict[str, Any]:
        """The pool's ``discovery`` in /admin/state: the last answer and what it left out."""
        return {
            "dns": self._config.dns,
            "record": self._config.record,
            "answered": answered,
            "max_members": self._config.max_members,
            "over_cap": over_cap,
            "dropped": [{"address": d.address, "reason": d.reason} for d in self._dropped[:SHOWN]],
            "dropped_count": len(self._dropped),
            "last_error": None,
        }

    def _left_out(self, dropped: tuple[Dropped, ...], over_cap: int) -> None:
        """Logs what an answer left out: dropped addresses when they change, the cap once per
        spell of answers over it."""
        name, dns = self._pool.name, self._config.dns
        if dropped and set(dropped) != set(self._dropped):
            shown = "; ".join(f"{d.address}: {d.reason}" for d in dropped[:SHOWN])
            more = f" (and {len(dropped) - SHOWN} more)" if len(dropped) > SHOWN else ""
            log.warning(
                "pool %s: %s: %d address(es) dropped: %s%s", name, dns, len(dropped), shown, more
            )
        self._dropped = dropped
        if over_cap and not self._over_cap:
            log.warning(
                "pool %s: %s named %d more replica(s) than discovery.max_members (%d); "
                "the rest are ignored while it does",
                name,
                dns,
                over_cap,
                self._config.max_members,
            )
        elif not over_cap and self._over_cap:
            log.info("pool %s: %s is within discovery.max_members again", name, dns)
        self._over_cap = over_cap > 0

    def apply(self, change: Change, wanted: dict[str, ReplicaConfig]) -> None:
        for rid in change.add:
            self._registry.add(self._pool, wanted[rid])
            log.info("pool %s: replica %s joined (%s)", self._pool.name, rid, wanted[rid].url)
        for member in self._pool.replicas:
            # a member whose SRV priority moved it
            config = wanted.get(member.id)
            if config is not None and config.standby != member.standby:
                member.assign_standby(config.standby)
                log.info(
                    "pool %s: replica %s is now %s",
                    self._pool.name,
                    member.id,
                    "standby" if config.standby else "active",
                )
        for rid in change.remove:
            replica = self._registry.drain(self._pool, rid)
            if replica is not None:
                log.info(
                    "pool %s: replica %s draining (%d in flight)",
                    self._pool.name,
                    rid,
                    replica.outstanding,
                )
                self._drains[rid] = asyncio.create_task(self._drain(replica), name=f"drain:{rid}")

    async def _drain(self, replica: Replica) -> None:
        deadline = self._clock.now() + self._config.drain_timeout_s
        while replica.outstanding > 0 and self._clock.now() < deadline:
            await self._clock.sleep(DRAIN_POLL_S)
        if self._registry.release(self._pool, replica):
            left = f", {replica.outstanding} still in flight" if replica.outstanding > 0 else ""
            log.info("pool %s: replica %s left%s", self._pool.name, replica.id, left)
        if self._drains.get(replica.id) is asyncio.current_task():
            del self._drains[replica.id]


class DiscoveryService:
    """The loops of every pool configured with `discovery`, started and stopped together."""

    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        resolvers: Callable[[DiscoveryConfig], Resolver] = resolver_for,
    ) -> None:
        self._loops = [
            PoolDiscovery(registry, pool, config, resolvers(config), clock)
            for pool in registry.pools.values()
            if (config := pool.config.discovery) is not None
        ]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        for loop in self._loops:
            self._tasks.append(asyncio.create_task(loop.run(), name=f"discovery:{loop.pool}"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

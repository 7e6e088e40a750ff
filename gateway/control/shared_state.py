"""This instance's side of shared state: what it tells other gateways and what it takes.

Local breaker transitions and ejections become `ReplicaSignal`s in a `SignalBook`; SLO
counters and retry-budget counts leave as deltas; a `StateSync` pushes both and pulls the others'
in the background. What comes back is applied to the same breaker and replica objects the
request path reads, so one instance's discovery protects all, and no request ever waits on
Redis. With the in-memory backend there is nothing to share and no sync runs.

Operators' decisions (drain, eject, pause: `gateway.state.decisions`) are kept here in a
`DecisionBook` and made real on the registry by `ManualControls`: at once when taken here, on
the pull that brings one from another gateway, and every `CONTROLS_S` (an eject runs out).
They travel with the sync's batches and, having no expiry, come back on every pull, so a
restarted gateway obeys them again from its first pull; a gateway without Redis keeps them in
``state.decisions_file`` instead, read back when it starts.

What comes back from the store is held to the rules of local state: an ejection lasts at most
the pool's ``max_ejection_s`` and stays within its ejected-share cap, and so does a drain or
eject decided elsewhere (`ManualControls`); heartbeats stamped in the future, or from another
run than a live one of their instance, are left out (`take_heartbeats`); whatever failed its
bounds on reading is counted in ``rejects`` (`gateway.state.rejects`).

The sync also carries this instance's heartbeat (from the callback `beat_with` sets) and brings
back every instance's: ``heartbeats`` is the fleet as the last pull showed it (`fleet_scope`
says whose; None without Redis, where the fleet view shows this instance only).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.clock import Clock
from gateway.config.state import StateConfig
from gateway.periodic import Periodic
from gateway.retry.budget import RetryBudget
from gateway.retry.budget_sharing import SharedBudgetCounts
from gateway.slo.engine import SloBook
from gateway.state.base import CounterDelta, ReplicaSignal, SharedView
from gateway.state.decision_file import read_decisions, write_decisions
from gateway.state.decisions import Decision, DecisionBook
from gateway.state.fleet import Heartbeat, take_heartbeats
from gateway.state.lease import Lease
from gateway.state.redis_store import RedisStore
from gateway.state.rejects import Rejects
from gateway.state.signals import SignalBook
from gateway.state.sync import StateSync
from gateway.telemetry.audit import AuditEvent, log_audit
from gateway.upstream.breaker import CLOSED, HALF_OPEN, OPEN
from gateway.upstream.controls import Change, ManualControls
from gateway.upstream.registry import Registry

ExportCounters = Callable[[], Mapping[str, CounterDelta]]
# others' totals, full
ApplyCounters = Callable[[Mapping[str, int], bool], None]
# how often decisions are enforced again (an eject's end is seen this late)
CONTROLS_S = 0.5


class SharedState:
    def __init__(
        self,
        config: StateConfig,
        registry: Registry,
        book: SloBook,
        budget: RetryBudget,
        clock: Clock,
    ) -> None:
        self._config = config
        self._registry = registry
        self._book = book
        self._clock = clock
        self.origin = config.instance or f"{socket.gethostname()}:{os.getpid()}"
        # when this instance started (a reload keeps it)
        self.started = clock.wall()
        self._ledger = SignalBook(self.origin, clock)
        # values read back (store, decisions file) that were dropped
        self.rejects = Rejects()
        self.decisions = DecisionBook(self.origin, self.rejects)
        self.controls = ManualControls(registry, clock, self.origin, self.rejects)
        self._audit_sink: Callable[[AuditEvent], None] | None = None
        self._change_sink: Callable[[list[Change]], None] | None = None
        self._enforcer = Periodic("manual-controls", CONTROLS_S, clock, self.enforce)
        self._decisions_file = config.decisions_file
        if self._decisions_file is not None:
            # small, read once (a restart's decisions)
            read = read_decisions(self._decisions_file, clock.wall(), self.rejects)
            self.decisions.adopt(read)
            self.enforce()
        self._applying = False
        self.applied = 0
        self._shared_counters: list[tuple[ExportCounters, ApplyCounters]] = []
        # every instance's, from the last pull
        self.heartbeats: dict[str, Heartbeat] = {}
        self._beat: Callable[[], Heartbeat] | None = None
        # this instance's last heartbeat
        self._published: Heartbeat | None = None
        self.sync: StateSync | None = None
        self._budget: SharedBudgetCounts | None = None
        if config.backend == "redis":
            self._budget = budget.share()
            store = RedisStore(
                config.url(os.environ),
                namespace=config.namespace,
                sentinel_auth=config.sentinel_auth(os.environ),
                rejects=self.rejects,
            )
            self.sync = StateSync(
                store,
                self._collect,
                self._apply,
                clock,
                interval_s=config.sync_interval_s,
                origin=self.origin,
                decisions=self.decisions.take_unsent,
                heartbeat=self._heartbeat,
            )

    def start(self) -> None:
        self._enforcer.start()
        if self.sync is not None:
            self.sync.start()

    async def stop(self) -> None:
        await self._enforcer.stop()
        if self.sync is not None:
            await self.sync.stop()

    # --- operators' decisions -------------------------------------------------------------

    def decide(
        self, key: str, action: str, by: str, reason: str, until: float = 0.0, floor: int = 0
    ) -> Decision:
        """Takes an operator's decision here and obeys it at once (`publish` shares it);
        ``floor``: its least version (a lease's fence, `gateway.state.lease`)."""
        decision = self.decisions.decide(key, action, by, reason, self._clock.wall(), until, floor)
        self.enforce()
        return decision

    async def lease(self, name: str, ttl_s: float, release: bool = False) -> Lease | None:
        """This instance's lease on ``name`` in the shared store (None: no store shared, so
        this instance alone decides); `StoreUnavailable` when the store does not answer."""
        if self.sync is None:
            return None
        return await self.sync.store.lease(name, self.origin, ttl_s, release)

    def share_counters(self, export: ExportCounters, apply: ApplyCounters) -> None:
        """Counters of another part (a rollout's evidence) pushed and pulled with the rest:
        ``export`` gives its deltas, ``apply`` takes the other instances' totals."""
        self._shared_counters.append((export, apply))

    async def publish(self) -> str | None:
        """Saves (``state.decisions_file``) and pushes what was decided here now, not at the
        next tick; None when done (or nothing to share with), else why not (a push is tried
        again on every tick)."""
        if self._decisions_file is not None:
            try:
                await asyncio.to_thread(
                    write_decisions, self._decisions_file, dict(self.decisions.known)
                )
            except (OSError, TypeError, ValueError) as exc:
                # unwritable, or a value unencodable
                reason = exc.strerror if isinstance(exc, OSError) else None
                return f"decisions file {self._decisions_file}: {reason or exc}"
        if self.sync is None:
            return None
        if await self.sync.tick():
            return None
        return self.sync.last_error or "the state store did not answer"

    def enforce(self) -> None:
        changed = self.controls.apply(self.decisions.known)
        if changed and self._change_sink is not None:
            self._change_sink(changed)

    def listen(
        self, audit: Callable[[AuditEvent], None], changes: Callable[[list[Change]], None]
    ) -> None:
        """Where audited actions and the changes decisions make go (the event timeline)."""
        self._audit_sink, self._change_sink = audit, changes

    def audit(self, event: AuditEvent) -> None:
        """One audited action: a JSON log line, and the timeline."""
        log_audit(event)
        if self._audit_sink is not None:
            self._audit_sink(event)

    def carry_from(self, old: SharedState) -> None:
        """A reload's new gateway takes the outgoing one's decisions and obeys them (and is
        the same instance, started when the outgoing one did)."""
        self.decisions.carry_from(old.decisions)
        # counts run on across a reload
        self.rejects.counts.update(old.rejects.counts)
        self.started = old.started
        self.enforce()

    def beat_with(self, heartbeat: Callable[[], Heartbeat]) -> None:
        """What this instance publishes as its heartbeat (`gateway.control.fleet.FleetBeacon`)."""
        self._beat = heartbeat

    @property
    def fleet_scope(self) -> str | None:
        """Which gateways the heartbeats cover; None when nothing is shared."""
        if self.sync is None:
            return None
        return f"every gateway of namespace {self._config.namespace!r} ({self.sync.store.name})"

    def synced(self) -> bool:
        """Whether what the store holds is known here (always, without a shared store)."""
        return self.sync is None or self.sync.last_ok_wall is not None

    @property
    def degraded(self) -> bool:
        return self.sync is not None and bool(self.sync.snapshot().get("degraded"))

    # --- local changes (registered as upstream events) ------------------------------------

    def breaker_transition(self, replica_id: str, old: str, new: str) -> None:
        if not self._applying and self.sync is not None:
            self._ledger.local(replica_id, new, self._ejected_until_wall(replica_id))

    def ejection(self, replica_id: str, reason: str) -> None:
        if not self._applying and self.sync is not None:
            replica = self._registry.replica(replica_id)
            state = replica.breaker.state() if replica and replica.breaker else CLOSED
            self._ledger.local(replica_id, state, self._ejected_until_wall(replica_id))

    def quarantine(self, replica: str, reason: str) -> None:
        # quarantines are local judgements of answers; they are not shared
        pass

    def _ejected_until_wall(self, replica_id: str) -> float:
        replica = self._registry.replica(replica_id)
        if replica is None or replica.ejected_until <= self._clock.now():
            return 0.0
        return self._clock.wall() + (replica.ejected_until - self._clock.now())

    # --- the sync's callbacks -------------------------------------------------------------

    def _collect(self) -> tuple[Sequence[ReplicaSignal], Mapping[str, CounterDelta]]:
        deltas = self._book.export_deltas()
        if self._budget is not None:
            deltas.update(self._budget.export_deltas())
        for export, _ in self._shared_counters:
            deltas.update(export())
        return self._ledger.take_unsent(), deltas

    def _heartbeat(self) -> Heartbeat | None:
        if self._beat is not None:
            self._published = self._beat()
        return self._published

    def _apply(self, view: SharedView) -> None:
        wall = self._clock.wall()
        own = self._published
        self.heartbeats, left = take_heartbeats(self.heartbeats, view.heartbeats, own, wall)
        for name, why in left:
            self.rejects.drop("store", "heartbeat", name, why)
        self._book.apply_remote(view.counters, view.full)
        if self._budget is not None:
            self._budget.apply_remote(view.counters, view.full)
        for _, apply in self._shared_counters:
            apply(view.counters, view.full)
        self._applying = True
        try:
            for signal in self._ledger.observe(view.signals):
                self._apply_signal(signal)
        finally:
            self._applying = False
        forgotten = self.decisions.forgotten
        fresh = self.decisions.observe(view.decisions, wall, view.lost)
        if fresh or self.decisions.forgotten != forgotten:
            self.enforce()
            for d in fresh:
                if d.origin != self.origin:
                    outcome = f"obeyed (decided on gateway {d.origin})"
                    if d.target in self.controls.refused:
                        outcome = f"refused: {self.controls.refused[d.target]}"
                    self.audit(
                        AuditEvent(
                            self._clock.wall(),
                            d.by,
                            d.action,
                            d.key,
                            d.reason,
                            outcome,
                            self.origin,
                        )
                    )

    def _apply_signal(self, signal: ReplicaSignal) -> None:
        replica = self._registry.replica(signal.replica_id)
        if replica is None:
            return
        self.applied += 1
        pool = self._registry.pools.get(replica.pool)
        left = signal.ejected_until_wall - self._clock.wall()
        if left > 0 and pool is not None:
            # bounded as this gateway's own ejections are
            now = self._clock.now()
            left = min(left, pool.config.outlier.max_ejection_s)
            if replica.ejected(now) or pool.outlier.admits():
                replica.adopt_ejection(now + left, f"ejected by gateway {signal.origin}")
            else:
                why = "the pool's ejected-share cap is reached"
                self.rejects.drop("store", "capped", replica.id, why)
        if replica.breaker is not None and signal.breaker in (OPEN, CLOSED, HALF_OPEN):
            replica.breaker.force(signal.breaker)

    def snapshot(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"backend": self._config.backend, "instance": self.origin}
        doc["decisions"] = self.controls.snapshot(self.decisions.known)
        # dropped on reading back, by source/kind
        doc["rejected"] = self.rejects.snapshot()
        if self.sync is not None:
            doc.update(self.sync.snapshot(), signals_applied=self.applied)
        return doc

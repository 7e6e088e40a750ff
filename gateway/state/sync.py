"""`StateSync`: the background task that pushes local changes to the store and pulls the rest.

Requests never wait on it: they read local state, which ``apply`` updates after each pull.
Every ``interval_s`` one `tick` pushes (local deltas and signals, as one numbered batch that the
store applies at most once) and then pulls (changes since the last cursor). On any failure it
marks itself degraded, keeps the unsent changes (at most ``max_pending_keys`` counter keys, the
oldest dropped first) and tries again next tick; when the store is back it pushes them, and if
the store lost its data meanwhile (a new generation) it pushes this instance's whole
contribution again, so totals reconcile. It never raises into its caller.

Operators' decisions (``decisions``: a callback giving the ones to offer) travel in the same
batches and come back, all of them, with every pull; the caller's `DecisionBook` offers again
whatever a store lacks, so they need no bookkeeping here (``SharedView.lost`` tells it whether
the store lost its data since, or a decision was deleted there on purpose).

This instance's heartbeat (``heartbeat``: a callback building it, `gateway.state.fleet`) goes
in a batch every ``heartbeat_every_s``; each pull brings every instance's, for the fleet view.

Batches are numbered per run (the batch origin is ``origin#<random>``), so an instance that
restarts under the same configured name is not taken for a replay of its previous run's batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gateway.clock import Clock
from gateway.state.base import (
    START,
    CounterDelta,
    Cursor,
    Pulled,
    PushBatch,
    ReplicaSignal,
    SharedView,
    StateStore,
    make_origin,
)
from gateway.state.decisions import Decision
from gateway.state.fleet import HEARTBEAT_EVERY_S, Heartbeat

log = logging.getLogger(__name__)

Collect = Callable[[], tuple[Sequence[ReplicaSignal], Mapping[str, CounterDelta]]]
Apply = Callable[[SharedView], None]
CollectDecisions = Callable[[], Sequence[Decision]]
# None: nothing to publish yet
MakeHeartbeat = Callable[[], Heartbeat | None]
MAX_PENDING_KEYS = 100_000
PRUNE_EVERY_S = 60.0


class StateSync:
    def __init__(
        self,
        store: StateStore,
        collect: Collect,
        apply: Apply,
        clock: Clock,
        *,
        interval_s: float = 0.5,
        origin: str | None = None,
        max_pending_keys: int = MAX_PENDING_KEYS,
        decisions: CollectDecisions | None = None,
        heartbeat: MakeHeartbeat | None = None,
        heartbeat_every_s: float = HEARTBEAT_EVERY_S,
    ) -> None:
        self.store = store
        self._collect = collect
        self._collect_decisions = decisions
        self._make_heartbeat = heartbeat
        self._heartbeat_every = heartbeat_every_s
        # when (clock.now()) the last heartbeat was built
        self._beat_at = float("-inf")
        self._pending_heartbeat: Heartbeat | None = None
        self._apply = apply
        self._clock = clock
        self.interval_s = interval_s
        self.origin = origin or make_origin()
        self._max_pending = max_pending_keys
        # this run's batches
        self._batch_origin = f"{self.origin}#{secrets.token_hex(4)}"
        self._next_number = 1
        # sent, reply not seen: resent as is
        self._unconfirmed: PushBatch | None = None
        # collected, not in a batch yet
        self._pending: dict[str, CounterDelta] = {}
        self._pending_signals: dict[str, ReplicaSignal] = {}
        self._pending_decisions: dict[str, Decision] = {}
        # confirmed in this generation, cumulative
        self._own: dict[str, CounterDelta] = {}
        self._own_signals: dict[str, ReplicaSignal] = {}
        self._cursor: Cursor = START
        self._pruned_at = float("-inf")
        self._task: asyncio.Task[None] | None = None
        # one tick at a time (the loop, a test, the final flush)
        self._lock = asyncio.Lock()
        # the store lost its data since the last apply
        self._lost = False
        self.degraded = False
        self.last_error: str | None = None
        # wall time degraded began (or last recovered)
        self.since: float | None = None
        self.ticks = self.failures = self.dropped_keys = self.resyncs = self.stale_signals = 0
        self.last_ok_wall: float | None = None
        self.last_round_trip_ms: float | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"state-sync-{self.store.name}")

    async def stop(self) -> None:
        """Stops the loop, tries one last push-and-pull (bounded by the store), closes it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await self.tick()
        with contextlib.suppress(Exception):
            await self.store.close()

    async def _run(self) -> None:
        while True:
            await self.tick()
            await self._clock.sleep(self.interval_s)

    # --- one round ----------------------------------------------------------------------

    async def tick(self) -> bool:
        """One push-then-pull; True if both succeeded. Never raises (but can be cancelled)."""
        async with self._lock:
            return await self._tick()

    async def _tick(self) -> bool:
        self.ticks += 1
        self._gather()
        started = time.perf_counter()
        try:
            await self._push_all()
            snapshot = await self.store.pull(self._cursor)
            if self._check_generation(snapshot.generation):
                # the store lost its data: ours goes back at once
                await self._push_all()
                snapshot = await self.store.pull(self._cursor)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(exc)
            return False
        self.last_round_trip_ms = (time.perf_counter() - started) * 1000
        self._absorb(snapshot)
        self._recovered()
        return True

    def _gather(self) -> None:
        try:
            signals, deltas = self._collect()
        except Exception:
            log.exception("state sync: collect failed; nothing gathered this tick")
            return
        for signal in signals:
            self._queue_signal(signal)
        for key, delta in deltas.items():
            current = self._pending.get(key)
            self._pending[key] = delta if current is None else current.plus(delta)
        self._bound_pending()
        self._gather_heartbeat()
        if self._collect_decisions is not None:
            try:
                decisions = self._collect_decisions()
            except Exception:
                log.exception("state sync: collecting decisions failed")
                return
            for decision in decisions:
                if decision.supersedes(self._pending_decisions.get(decision.key)):
                    self._pending_decisions[decision.key] = decision

    def _gather_heartbeat(self) -> None:
        now = self._clock.now()
        if self._make_heartbeat is None or now - self._beat_at < self._heartbeat_every:
            return
        self._beat_at = now
        try:
            self._pending_heartbeat = self._make_heartbeat()
        except Exception:
            log.exception("state sync: building the heartbeat failed")

    async def _push_all(self) -> None:
        # at most: the unconfirmed batch, the pending one, and a resync after a new generation
        for _ in range(3):
            if self._unconfirmed is None:
                if not (
                    self._pending
                    or self._pending_signals
                    or self._pending_decisions
                    or self._pending_heartbeat
                ):
                    return
                self._unconfirmed = PushBatch(
                    self._batch_origin,
                    self._next_number,
                    tuple(self._pending_signals.values()),
                    self._pending,
                    tuple(self._pending_decisions.values()),
                    self._pending_heartbeat,
                )
                self._next_number += 1
                self._pending, self._pending_signals, self._pending_decisions = {}, {}, {}
                self._pending_heartbeat = None
            batch = self._unconfirmed
            result = await self.store.push(batch)
            self._unconfirmed = None
            self._check_generation(result.generation)
            self.stale_signals += len(result.stale)
            for key, delta in batch.counters.items():
                current = self._own.get(key)
                self._own[key] = delta if current is None else current.plus(delta)
            for signal in batch.signals:
                if signal.supersedes(self._own_signals.get(signal.replica_id)):
                    self._own_signals[signal.replica_id] = signal

    def _absorb(self, snapshot: Pulled) -> None:
        self._check_generation(snapshot.generation)
        self._cursor = snapshot.cursor
        others = {}
        for key, total in snapshot.counters.items():
            mine = self._own.get(key)
            others[key] = max(0, total - (mine.amount if mine is not None else 0))
        try:
            lost, self._lost = self._lost, False
            self._apply(
                SharedView(
                    snapshot.signals,
                    others,
                    snapshot.full,
                    snapshot.decisions,
                    snapshot.heartbeats,
                    lost,
                )
            )
        except Exception:
            log.exception("state sync: apply failed; the next pull fetches everything again")
            self._cursor = Cursor(self._cursor.generation, 0)
        self._prune_own()

    def _check_generation(self, generation: str) -> bool:
        """A new generation means the store lost its data: queue all of ours to push again."""
        known = self._cursor.generation
        if not known or generation == known:
            if not known:
                self._cursor = Cursor(generation, 0)
            return False
        self.resyncs += 1
        self._lost = True
        log.warning(
            "state store %s lost its data (generation %s -> %s): pushing %d counters and %d "
            "signals of this instance again",
            self.store.name,
            known,
            generation,
            len(self._own),
            len(self._own_signals),
        )
        for key, delta in self._own.items():
            current = self._pending.get(key)
            self._pending[key] = delta if current is None else current.plus(delta)
        for signal in self._own_signals.values():
            self._queue_signal(signal)
        self._own, self._own_signals = {}, {}
        self._cursor = Cursor(generation, 0)
        return True

    def _queue_signal(self, signal: ReplicaSignal) -> None:
        if signal.supersedes(self._pending_signals.get(signal.replica_id)):
            self._pending_signals[signal.replica_id] = signal

    def _bound_pending(self) -> None:
        """Counter keys waiting (pending plus the unconfirmed batch) stay within the bound."""
        waiting = len(self._unconfirmed.counters) if self._unconfirmed is not None else 0
        excess = len(self._pending) + waiting - self._max_pending
        if excess <= 0:
            return
        for key in list(self._pending)[:excess]:
            # the oldest keys first
            del self._pending[key]
        self.dropped_keys += excess

    def _prune_own(self) -> None:
        wall = self._clock.wall()
        if wall - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = wall
        self._own = {k: d for k, d in self._own.items() if d.expire_at > wall}
        self._pending = {k: d for k, d in self._pending.items() if d.expire_at > wall}
        # expired signals: a store drops them, so there is nothing to push again after a reset
        self._own_signals = {r: s for r, s in self._own_signals.items() if s.expires_at() > wall}
        self._pending_signals = {
            r: s for r, s in self._pending_signals.items() if s.expires_at() > wall
        }

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self.last_error = str(exc) or type(exc).__name__
        if not self.degraded:
            self.degraded = True
            self.since = self._clock.wall()
            log.warning(
                "state store %s unavailable, serving on local state: %s",
                self.store.name,
                self.last_error,
            )

    def _recovered(self) -> None:
        self.last_ok_wall = self._clock.wall()
        if self.degraded:
            log.info(
                "state store %s back after %.1f s; reconciled",
                self.store.name,
                self.last_ok_wall - (self.since or self.last_ok_wall),
            )
            self.degraded = False
            self.since = self.last_ok_wall

    def snapshot(self) -> dict[str, Any]:
        """For ``/admin/state``: the store, whether degraded since when, and backlog."""
        unconfirmed = self._unconfirmed
        return {
            "store": self.store.describe(),
            "origin": self.origin,
            "degraded": self.degraded,
            "since": self.since,
            "last_error": self.last_error,
            "last_ok": self.last_ok_wall,
            "interval_s": self.interval_s,
            "round_trip_ms": self.last_round_trip_ms,
            "pending_keys": len(self._pending) + (len(unconfirmed.counters) if unconfirmed else 0),
            "pending_signals": len(self._pending_signals),
            "pending_decisions": len(self._pending_decisions),
            "dropped_keys": self.dropped_keys,
            "ticks": self.ticks,
            "failures": self.failures,
            "resyncs": self.resyncs,
            "stale_signals": self.stale_signals,
            "generation": self._cursor.generation or None,
        }

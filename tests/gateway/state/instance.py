"""One gateway instance's shared-state wiring, as the gateway does it, for the sync tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.clock import Clock
from gateway.slo.config import SloConfig
from gateway.slo.engine import SloBook
from gateway.state.base import CounterDelta, ReplicaSignal, SharedView, StateStore
from gateway.state.signals import SignalBook
from gateway.state.sync import MAX_PENDING_KEYS, StateSync

SLOS = {"digits": (SloConfig(name="avail", kind="availability", objective=0.99),)}


class Instance:
    def __init__(
        self, store: StateStore, clock: Clock, name: str, max_pending_keys: int = MAX_PENDING_KEYS
    ) -> None:
        self.book = SloBook(SLOS, clock)
        self.ledger = SignalBook(name, clock)
        self.applied: list[ReplicaSignal] = []
        self.sync = StateSync(
            store,
            self.collect,
            self.apply,
            clock,
            origin=name,
            interval_s=0.5,
            max_pending_keys=max_pending_keys,
        )

    def collect(self) -> tuple[Sequence[ReplicaSignal], Mapping[str, CounterDelta]]:
        return self.ledger.take_unsent(), self.book.export_deltas()

    def apply(self, view: SharedView) -> None:
        self.book.apply_remote(view.counters, view.full)
        self.applied += self.ledger.observe(view.signals)

    def record(self, ok: int, failed: int = 0) -> None:
        for _ in range(ok):
            self.book.record("digits", 200, 0.01)
        for _ in range(failed):
            self.book.record("digits", 503, 0.01)

    def seen(self) -> tuple[int, int]:
        """(total, bad) events of all instances in the last hour, as this instance sees them."""
        counts = self.book.trackers["digits"][0].window.counts(3600)
        return counts.total, counts.bad

from __future__ import annotations

from gateway.slo.config import SloConfig
from gateway.slo.engine import SloBook
from gateway.state.base import CounterDelta
from tests.support.clock import FakeClock

SLOS = {"digits": (SloConfig(name="avail", kind="availability", objective=0.99),)}


def _totals(*exports: dict[str, CounterDelta]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for export in exports:
        for key, delta in export.items():
            totals[key] = totals.get(key, 0) + delta.amount
    return totals


def test_counters_are_keyed_by_model_slo_resolution_bucket_and_field() -> None:
    clock = FakeClock()
    book = SloBook(SLOS, clock)
    book.record("digits", 500, 0.01, degraded=True)
    start = int(clock.wall())
    assert book.export_deltas() == {
        f"slo:digits:avail:f:{start}:t": CounterDelta(1, start + 10 + 3610 + 120),
        f"slo:digits:avail:f:{start}:d": CounterDelta(1, start + 10 + 3610 + 120),
        f"slo:digits:avail:c:{start}:t": CounterDelta(1, start + 300 + 30 * 86_400 + 300 + 120),
        f"slo:digits:avail:c:{start}:d": CounterDelta(1, start + 300 + 30 * 86_400 + 300 + 120),
    }
    assert book.export_deltas() == {}


def test_two_instances_see_global_budgets_after_exchanging_counters() -> None:
    clock = FakeClock()
    a, b = SloBook(SLOS, clock), SloBook(SLOS, clock)
    for status in (200,) * 8 + (500,) * 2:
        a.record("digits", status, 0.01)
    for _ in range(10):
        b.record("digits", 200, 0.01)
    from_a, from_b = a.export_deltas(), b.export_deltas()
    a.apply_remote(_totals(from_b))  # the others' totals, as StateSync hands them over
    b.apply_remote(_totals(from_a))
    for book in (a, b):
        budget = book.trackers["digits"][0].budget()
        assert budget["events"]["total"] == 20 and budget["events"]["bad"] == 2
        assert budget["error_budget"]["consumed"] == 10.0  # 2 bad; 1 % of 20 is 0.2
    b.apply_remote({}, full=True)  # a full view without A's keys: A's counts are gone
    assert b.trackers["digits"][0].budget()["events"]["total"] == 10


def test_foreign_or_malformed_keys_are_ignored() -> None:
    book = SloBook(SLOS, FakeClock())
    book.apply_remote(
        {
            "budget:x": 5,
            "slo:digits:avail:f:abc:t": 5,
            "slo:digits:avail:f:0:z": 5,
            "slo:nope:avail:f:0:t": 5,
            "slo:": 5,
        }
    )
    assert book.trackers["digits"][0].window.counts(86_400).total == 0

"""The policies' buffers kept across requests stay within their bounds when filled past them."""

from __future__ import annotations

from gateway.faults.record import KEPT_TIMES, FaultRecord
from gateway.upstream.latency import LatencyWindow
from gateway.voting.suspects import SuspectTracker
from tests.support.clock import FakeClock


def test_the_latency_window_keeps_its_size_of_samples() -> None:
    window = LatencyWindow(size=512, refresh_every=64)
    recorded = 64 * 1_500  # a whole number of refreshes
    for n in range(recorded):
        window.record(n / 1e6)
    assert window.count == recorded
    assert len(window._samples) == 512
    assert len(window._sorted) == 512
    assert window.quantile(0.0) == (recorded - 512) / 1e6  # only the newest are kept


def test_the_fault_record_keeps_at_most_max_inputs_with_their_last_times() -> None:
    record = FaultRecord(FakeClock(), max_inputs=32)
    for n in range(1_000):
        for _ in range(3 * KEPT_TIMES):
            record.refused(f"input-{n}", 500)
    assert len(record._refused) == 32
    assert all(len(times) == KEPT_TIMES for times in record._refused.values())
    assert ("input-999", 500) in record._refused  # the least recently refused went first


def test_a_suspects_record_keeps_its_window_of_votes() -> None:
    tracker = SuspectTracker(window=50, min_votes=10, ratio=0.5)
    for n in range(10_000):
        tracker.observe("r0", rows=4, dissented_rows=n % 2)
    record = tracker._records["r0"]
    assert len(record.votes) == 50
    assert record.total_votes == 40_000

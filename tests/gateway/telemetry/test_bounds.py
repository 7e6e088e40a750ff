"""Every buffer telemetry keeps across requests stays within its bound when filled past it."""

from __future__ import annotations

from gateway.telemetry.history_buffers import (
    MAX_SKETCH_BUCKETS,
    Event,
    EventLog,
    LatencySketch,
    SampleRing,
)
from gateway.telemetry.metrics import BoundedLabel
from gateway.telemetry.throttle import MAX_KEYS, LogThrottle
from tests.support.clock import FakeClock


def test_the_sample_ring_keeps_its_capacity_of_rows_the_newest() -> None:
    ring = SampleRing(capacity=60)
    for second in range(1_000):
        ring.append({"t": float(second)})
    assert len(ring) == 60
    assert [row["t"] for row in ring] == [float(s) for s in range(940, 1_000)]


def test_a_reloads_ring_takes_the_old_rows_within_its_capacity() -> None:
    old, new = SampleRing(capacity=60), SampleRing(capacity=60)
    for second in range(100):
        old.append({"t": float(second)})
    new.append({"t": 100.0})
    new.take_from(old)
    assert len(new) == 60
    assert [row["t"] for row in new][-2:] == [99.0, 100.0]


def test_the_event_log_keeps_its_capacity_of_events_and_counts_by_kind() -> None:
    log = EventLog(capacity=200)
    for n in range(5_000):
        log.record(Event(float(n), "breaker" if n % 2 else "health", f"r{n}", "changed"))
    assert len(log) == 200
    assert log.newest_first(1)[0].t == 4_999.0
    assert dict(log.counts) == {"breaker": 2_500, "health": 2_500}
    other = EventLog(capacity=200)
    other.take_from(log)
    assert len(other) == 200


def test_the_latency_sketch_has_a_bounded_number_of_buckets_whatever_the_latencies() -> None:
    sketch = LatencySketch()
    latency = 1e-9
    while latency < 1e12:  # from a nanosecond to tens of thousands of years
        sketch.add(latency)
        latency *= 1.01
    assert sketch.count > 4_000
    assert len(sketch._buckets) <= MAX_SKETCH_BUCKETS
    assert MAX_SKETCH_BUCKETS < 500


def test_the_log_throttle_remembers_at_most_max_keys() -> None:
    throttle = LogThrottle(FakeClock(), interval_s=10.0)
    for n in range(MAX_KEYS * 5):
        throttle.allow(("dissent", f"replica-{n}"))
        throttle.allow(("dissent", f"replica-{n}"))  # held back: counted under its key
    assert len(throttle._next) <= MAX_KEYS
    assert len(throttle._held) <= MAX_KEYS


def test_a_bounded_label_remembers_at_most_its_limit_and_maps_the_rest_to_other() -> None:
    label = BoundedLabel(limit=64)
    values = [label(f"replica-{n}") for n in range(1_000)]
    assert len(label._seen) == 64
    assert values[63] == "replica-63"
    assert set(values[64:]) == {"other"}

"""Noisy lines: one per key per interval, the next one counting what was held back."""

from __future__ import annotations

from gateway.telemetry.throttle import LogThrottle
from tests.support.clock import FakeClock


def test_one_line_per_key_per_interval_and_the_count_held_back() -> None:
    clock = FakeClock()
    throttle = LogThrottle(clock, interval_s=10.0)
    assert throttle.allow("a") == 0
    assert [throttle.allow("a") for _ in range(5)] == [None] * 5
    assert throttle.allow("b") == 0  # keys are independent
    clock.advance(9.9)
    assert throttle.allow("a") is None
    clock.advance(0.1)
    assert throttle.allow("a") == 6  # the next line says six were held back
    assert throttle.allow("a") is None

from __future__ import annotations

from gateway.clock import FakeClock
from gateway.config.policies import BreakerConfig
from gateway.policies.classify import Outcome, OutcomeKind, classify_status
from gateway.upstream.breaker import CLOSED, HALF_OPEN, OPEN, ReplicaBreaker

CONFIG = BreakerConfig(
    failure_threshold=3, reset_timeout_s=2, success_threshold=2, half_open_max_calls=1
)
FAIL = classify_status("r", 500, 0.01)
OK = classify_status("r", 200, 0.01)


def _tripped(clock: FakeClock, transitions: list[tuple[str, str]]) -> ReplicaBreaker:
    breaker = ReplicaBreaker(
        "r", CONFIG, clock, (lambda rid, old, new: transitions.append((old, new)),)
    )
    for _ in range(3):
        assert breaker.acquire()
        breaker.record(FAIL, CLOSED)
    return breaker


def test_trips_after_threshold_and_rejects_while_open() -> None:
    clock, seen = FakeClock(), []
    breaker = _tripped(clock, seen)
    assert breaker.state() == OPEN
    assert not breaker.admits() and not breaker.acquire()
    assert seen == [(CLOSED, OPEN)]


def test_half_open_after_the_injected_clock_moves_with_bounded_permits() -> None:
    clock, seen = FakeClock(), []
    breaker = _tripped(clock, seen)
    clock.advance(1.9)
    assert breaker.state() == OPEN
    clock.advance(0.2)
    assert breaker.state() == HALF_OPEN
    assert breaker.acquire()
    assert not breaker.acquire()  # only one probe at a time
    breaker.record(OK, HALF_OPEN)
    assert breaker.acquire()
    breaker.record(OK, HALF_OPEN)
    assert breaker.state() == CLOSED
    assert breaker.half_open_granted == 2
    assert seen == [(CLOSED, OPEN), (OPEN, HALF_OPEN), (HALF_OPEN, CLOSED)]


def test_failed_probe_reopens() -> None:
    clock, seen = FakeClock(), []
    breaker = _tripped(clock, seen)
    clock.advance(2)
    assert breaker.acquire()
    breaker.record(FAIL, HALF_OPEN)
    assert breaker.state() == OPEN
    clock.advance(1)
    assert breaker.state() == OPEN  # the reset timer restarted at the re-open


def test_client_errors_and_cancellations_never_count() -> None:
    breaker = ReplicaBreaker("r", CONFIG, FakeClock())
    for _ in range(10):
        breaker.record(classify_status("r", 400, 0.01), CLOSED)
        breaker.record(Outcome(OutcomeKind.CANCELLED, "r", 0.0), CLOSED)
    assert breaker.state() == CLOSED


def test_cancelled_half_open_probe_returns_its_permit() -> None:
    clock = FakeClock()
    breaker = _tripped(clock, [])
    clock.advance(2)
    assert breaker.acquire()
    breaker.record(Outcome(OutcomeKind.CANCELLED, "r", 0.0), HALF_OPEN)
    assert breaker.acquire()

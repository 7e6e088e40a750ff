from __future__ import annotations

import math
from datetime import UTC, datetime

from gateway.config.policies import BreakerConfig
from gateway.outcome import Outcome, OutcomeKind
from gateway.policies.classify import classify_status
from gateway.upstream.breaker import CLOSED, HALF_OPEN, OPEN, ClockStorage, ReplicaBreaker
from tests.support.clock import FakeClock

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
    clock, seen = FakeClock(), list[tuple[str, str]]()
    breaker = _tripped(clock, seen)
    assert breaker.state() == OPEN
    assert not breaker.admits() and not breaker.acquire()
    assert seen == [(CLOSED, OPEN)]


def test_half_open_after_the_injected_clock_moves_with_bounded_permits() -> None:
    clock, seen = FakeClock(), list[tuple[str, str]]()
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
    clock, seen = FakeClock(), list[tuple[str, str]]()
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


# --- pybreaker is the one state machine; the injected clock times it -------------------------


def test_half_open_exactly_at_the_reset_timeout_never_before() -> None:
    clock, seen = FakeClock(start=1000.1), list[tuple[str, str]]()
    breaker = _tripped(clock, seen)
    due = clock.now() + CONFIG.reset_timeout_s
    for early in (clock.now() + 0.5, clock.now() + 1.5, math.nextafter(due, -math.inf)):
        clock.advance_to(early)
        assert breaker.state() == OPEN
        assert not breaker.admits() and not breaker.acquire()
        assert breaker.snapshot()["state"] == OPEN
    assert seen == [(CLOSED, OPEN)]
    clock.advance_to(due)
    assert breaker.state() == HALF_OPEN
    assert breaker._cb.current_state == HALF_OPEN
    assert seen == [(CLOSED, OPEN), (OPEN, HALF_OPEN)]


def test_pybreaker_storage_is_the_single_source_of_state() -> None:
    clock = FakeClock()
    breaker = ReplicaBreaker("r", CONFIG, clock)
    storage = breaker._cb._state_storage
    assert isinstance(storage, ClockStorage)
    breaker.record(FAIL, CLOSED)
    breaker.record(FAIL, CLOSED)
    assert breaker._cb.fail_counter == storage.counter == 2
    # pybreaker's own API moves the state, and every view of the adapter follows at once
    breaker._cb.open()
    assert not breaker.closed and breaker.state() == OPEN and not breaker.admits()
    assert storage.opened_at == datetime.fromtimestamp(clock.wall(), UTC)  # injected clock
    breaker._cb.close()
    assert breaker.closed and breaker.state() == CLOSED and storage.counter == 0
    assert breaker.transitions == 2
    # and the adapter keeps none of it: no mirror of state, counters or opening time
    kept = set(vars(breaker))
    assert not kept & {"closed", "_state", "_opened_at", "_fail_counter", "_success_counter"}


def test_closed_success_resets_the_failure_count() -> None:
    breaker = ReplicaBreaker("r", CONFIG, FakeClock())
    for outcome in (FAIL, FAIL, OK, FAIL, FAIL):
        breaker.record(outcome, CLOSED)
    assert breaker.state() == CLOSED
    breaker.record(FAIL, CLOSED)
    assert breaker.state() == OPEN


def test_half_open_permits_are_bounded() -> None:
    config = CONFIG.model_copy(update={"half_open_max_calls": 2, "success_threshold": 5})
    clock = FakeClock()
    breaker = ReplicaBreaker("r", config, clock)
    for _ in range(3):
        breaker.record(FAIL, CLOSED)
    clock.advance(config.reset_timeout_s)
    assert breaker.acquire() and breaker.acquire()
    assert not breaker.admits() and not breaker.acquire()
    breaker.record(OK, HALF_OPEN)
    assert breaker.admits() and breaker.acquire()
    assert not breaker.acquire()
    assert breaker.half_open_granted == 3 and breaker.half_open_peak == 2
    assert breaker.snapshot()["half_open_in_flight"] == 2


def test_success_threshold_closes_and_a_failed_probe_reopens_with_a_fresh_count() -> None:
    config = CONFIG.model_copy(update={"success_threshold": 3})
    clock, seen = FakeClock(), list[str]()
    breaker = ReplicaBreaker("r", config, clock, (lambda r, old, new: seen.append(new),))
    for _ in range(3):
        breaker.record(FAIL, CLOSED)
    clock.advance(config.reset_timeout_s)
    for passes in (1, 2):
        assert breaker.acquire()
        breaker.record(OK, HALF_OPEN)
        assert breaker.state() == HALF_OPEN and breaker._cb.success_counter == passes
    assert breaker.acquire()
    breaker.record(FAIL, HALF_OPEN)  # one failed probe re-opens, whatever passed before
    assert breaker.state() == OPEN and breaker._cb.success_counter == 0
    clock.advance(config.reset_timeout_s)
    for _ in range(3):
        assert breaker.acquire()
        breaker.record(OK, HALF_OPEN)
    assert breaker.state() == CLOSED and breaker.closed
    assert breaker._cb.fail_counter == 0 and breaker._cb.success_counter == 0
    assert seen == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]


def test_a_straggler_verdict_while_open_changes_nothing() -> None:
    clock, seen = FakeClock(), list[tuple[str, str]]()
    breaker = _tripped(clock, seen)
    opened = breaker._storage.opened_on_clock
    counters = (breaker._cb.fail_counter, breaker._cb.success_counter)
    clock.advance(1)
    for outcome in (FAIL, OK, FAIL):
        breaker.record(outcome, CLOSED)  # admitted while closed, finished after the trip
        breaker.judge(outcome)  # or judged later, by evidence
    assert breaker.state() == OPEN and breaker.transitions == 1
    assert breaker._storage.opened_on_clock == opened  # the reset timer did not restart
    assert (breaker._cb.fail_counter, breaker._cb.success_counter) == counters
    clock.advance(CONFIG.reset_timeout_s - 1)
    assert breaker.state() == HALF_OPEN


def test_a_forced_open_times_out_on_the_injected_clock_and_trial_skips_the_wait() -> None:
    clock = FakeClock()
    breaker = ReplicaBreaker("r", CONFIG, clock)
    breaker.force(OPEN)  # another gateway instance tripped it
    clock.advance(CONFIG.reset_timeout_s / 2)
    assert breaker.state() == OPEN
    assert breaker.trial() and breaker.state() == HALF_OPEN
    assert not breaker.trial()  # only an open breaker gets a trial
    breaker.force(CLOSED)
    assert breaker.closed and breaker.transitions == 3

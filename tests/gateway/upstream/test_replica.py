"""Replica records what the reactors decided, through one named method per change."""

from __future__ import annotations

from gateway.config.endpoint import Endpoint
from gateway.upstream.replica import Replica


def _replica() -> Replica:
    return Replica(id="r", pool="p", endpoint=Endpoint("127.0.0.1", 1))


def test_eject_records_the_ejection_and_restarts_the_failure_streak() -> None:
    replica = _replica()
    replica.charge("boom")
    replica.charge("boom")
    replica.eject(10.0, 2.5, "2 consecutive failures")
    assert replica.ejected(12.4) and not replica.ejected(12.5)
    assert (replica.ejections, replica.last_ejected_at) == (1, 10.0)
    assert replica.ejection_reason == "2 consecutive failures"
    assert replica.consecutive_failures == 0
    assert replica.failures == 2  # the totals stay
    replica.eject(20.0, 5.0, "again")
    assert (replica.ejections, replica.ejected_until) == (2, 25.0)


def test_reinstate_ends_the_ejection_but_keeps_its_history() -> None:
    replica = _replica()
    replica.eject(10.0, 5.0, "why")
    replica.reinstate()
    assert not replica.ejected(10.0)
    assert (replica.ejections, replica.ejection_reason) == (1, "why")
    replica.forget_ejections()
    assert replica.ejections == 0


def test_an_adopted_ejection_never_shortens_our_own() -> None:
    replica = _replica()
    replica.eject(10.0, 5.0, "ours")
    replica.adopt_ejection(12.0, "ejected by gateway g2")
    assert replica.ejected_until == 15.0
    assert replica.ejection_reason == "ejected by gateway g2"
    assert replica.ejections == 1  # another gateway's ejection does not lengthen our next one
    replica.adopt_ejection(30.0, "ejected by gateway g3")
    assert replica.ejected_until == 30.0


def test_probe_results_keep_one_streak_at_a_time() -> None:
    replica = _replica()
    replica.probe_passed()
    replica.probe_passed()
    assert (replica.probe_successes, replica.probe_failures) == (2, 0)
    replica.probe_failed("health probe: refused")
    assert (replica.probe_successes, replica.probe_failures) == (0, 1)
    assert replica.last_error == "health probe: refused"
    assert replica.healthy is None  # the prober's thresholds decide the verdict
    replica.mark_health(False)
    assert replica.snapshot(0.0)["healthy"] is False


def test_golden_misses_count_in_a_row() -> None:
    replica = _replica()
    assert replica.golden_failed("3 of 8 wrong") == 1
    assert replica.golden_failed("4 of 8 wrong") == 2
    assert replica.golden_last == "4 of 8 wrong"
    replica.golden_passed("8 of 8 right")
    assert (replica.golden_failures, replica.golden_last) == (0, "8 of 8 right")
    assert replica.golden_failed("wrong again") == 1


def test_quarantine_is_taken_once() -> None:
    replica = _replica()
    assert replica.quarantine(0.0, 60.0, "wrong answers")
    assert not replica.quarantine(30.0, 60.0, "still wrong")
    assert (replica.quarantined_until, replica.quarantine_reason) == (60.0, "wrong answers")
    assert replica.quarantine(60.0, 60.0, "wrong once more")

from __future__ import annotations

from gateway.config.endpoint import Endpoint
from gateway.config.policies import OutlierConfig
from gateway.faults.classify import classify_status
from gateway.upstream.outlier import OutlierDetector
from gateway.upstream.replica import Replica
from tests.support.clock import FakeClock

CONFIG = OutlierConfig(
    consecutive_failures=3, base_ejection_s=2, max_ejection_s=5, max_ejection_percent=50
)


def _pool(n: int) -> list[Replica]:
    return [Replica(id=f"r{i}", pool="p", endpoint=Endpoint("127.0.0.1", 1 + i)) for i in range(n)]


def _fail(detector: OutlierDetector, replica: Replica, times: int) -> None:
    for _ in range(times):
        replica.started()
        outcome = classify_status(replica.id, 500, 0.01)
        replica.finished(0.01, outcome.describe())
        detector.observe(replica, outcome)


def test_consecutive_failures_eject_for_a_growing_time() -> None:
    clock = FakeClock()
    replicas = _pool(4)
    detector = OutlierDetector(replicas, CONFIG, clock)
    _fail(detector, replicas[0], 2)
    assert not detector.is_ejected(replicas[0])
    _fail(detector, replicas[0], 1)
    assert detector.is_ejected(replicas[0])
    clock.advance(2.01)
    assert not detector.is_ejected(replicas[0])
    _fail(detector, replicas[0], 3)
    assert replicas[0].ejected_until - clock.now() == 4.0  # second ejection: 2 × base
    clock.advance(4.01)
    _fail(detector, replicas[0], 3)
    assert replicas[0].ejected_until - clock.now() == 5.0  # capped


def test_never_more_than_the_max_share_but_always_one() -> None:
    clock = FakeClock()
    replicas = _pool(3)
    detector = OutlierDetector(replicas, CONFIG, clock)
    for replica in replicas:
        _fail(detector, replica, 3)
    assert detector.ejected_count() == 1  # 50 % of 3 is 1.5: a second would be 66 %

    single = _pool(1)
    lone = OutlierDetector(single, CONFIG, clock)
    _fail(lone, single[0], 3)
    assert lone.ejected_count() == 1


def test_success_resets_the_streak() -> None:
    clock = FakeClock()
    replicas = _pool(2)
    detector = OutlierDetector(replicas, CONFIG, clock)
    _fail(detector, replicas[0], 2)
    replicas[0].started()
    replicas[0].finished(0.01, None)
    _fail(detector, replicas[0], 2)
    assert not detector.is_ejected(replicas[0])


class _Ejections:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        pass

    def ejection(self, replica: str, reason: str) -> None:
        self.seen.append((replica, reason))

    def quarantine(self, replica: str, reason: str) -> None:
        pass


def _timed_out(detector: OutlierDetector, replica: Replica, latency_s: float) -> None:
    replica.started()
    outcome = classify_status(replica.id, 504, latency_s)
    replica.finished(latency_s, outcome.describe())
    detector.observe(replica, outcome)


def test_a_streak_over_failing_for_ejects_however_few_its_failures() -> None:
    # a hung replica that load-aware routing starves: a try now and then, each timing out
    clock = FakeClock()
    replicas = _pool(4)
    events = _Ejections()
    config = CONFIG.model_copy(update={"consecutive_failures": 5, "failing_for_s": 10.0})
    detector = OutlierDetector(replicas, config, clock, events)
    hung = replicas[0]
    _timed_out(detector, hung, 1.0)
    # the streak began when its first failed try did: 1 s before it ended
    assert hung.failing_since == clock.now() - 1.0
    clock.advance(8.9)
    _timed_out(detector, hung, 1.0)
    assert not detector.is_ejected(hung)  # 9.9 s since the streak began
    clock.advance(0.1)
    _timed_out(detector, hung, 1.0)
    assert detector.is_ejected(hung)
    assert hung.ejection_reason == "3 failures in a row over 10.0 s"
    assert events.seen == [("r0", "failing_for")]
    # the ejection starts a new streak: its next failure is its first
    clock.advance(2.01)
    _timed_out(detector, hung, 1.0)
    assert hung.consecutive_failures == 1 and not detector.is_ejected(hung)


def test_an_answer_within_failing_for_ends_the_streak() -> None:
    # overloaded, not hung: some tries fail, some are answered
    clock = FakeClock()
    replicas = _pool(4)
    config = CONFIG.model_copy(update={"consecutive_failures": 5, "failing_for_s": 10.0})
    detector = OutlierDetector(replicas, config, clock)
    busy = replicas[0]
    for _ in range(6):
        _timed_out(detector, busy, 1.0)
        clock.advance(6.0)
        busy.started()
        busy.finished(3.0, None)
        detector.observe(busy, classify_status(busy.id, 200, 3.0))
        clock.advance(6.0)
    assert busy.ejections == 0


def test_one_failure_however_long_its_try_is_no_streak() -> None:
    clock = FakeClock()
    replicas = _pool(4)
    config = CONFIG.model_copy(update={"consecutive_failures": 5, "failing_for_s": 10.0})
    detector = OutlierDetector(replicas, config, clock)
    _timed_out(detector, replicas[0], 30.0)
    assert not detector.is_ejected(replicas[0])


def test_failing_for_zero_is_off() -> None:
    clock = FakeClock()
    replicas = _pool(4)
    config = CONFIG.model_copy(update={"consecutive_failures": 5, "failing_for_s": 0.0})
    detector = OutlierDetector(replicas, config, clock)
    for _ in range(4):
        _timed_out(detector, replicas[0], 1.0)
        clock.advance(100.0)
    assert replicas[0].ejections == 0


def test_succeeded_counts_as_started_and_finished_for_each() -> None:
    one, many = _pool(2)
    many.id = one.id
    one.consecutive_failures = many.consecutive_failures = 3
    latencies = [0.010, 0.030, 0.002, 0.5, 0.004]
    for latency in latencies:
        one.started()
        one.finished(latency, None)
    many.succeeded(latencies)
    assert (one.requests, one.outstanding, one.consecutive_failures) == (5, 0, 0)
    assert (many.requests, many.outstanding, many.consecutive_failures) == (5, 0, 0)
    assert many.ewma_latency_s == one.ewma_latency_s

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

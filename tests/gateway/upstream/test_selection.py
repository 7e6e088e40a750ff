from __future__ import annotations

import random
from collections import Counter
from typing import cast

import pytest

from gateway.config.endpoint import Endpoint
from gateway.policies.load_report import LoadReport
from gateway.upstream import selection
from gateway.upstream.replica import Replica
from gateway.upstream.selection import Loaded, PowerOfTwoChoices


def _replicas(loads: list[int]) -> list[Replica]:
    return [
        Replica(id=f"r{i}", pool="p", endpoint=Endpoint("127.0.0.1", 9000 + i), outstanding=load)
        for i, load in enumerate(loads)
    ]


def test_empty_and_single() -> None:
    p2c = PowerOfTwoChoices(random.Random(1))
    assert p2c.pick([]) is None
    only = _replicas([5])
    assert p2c.pick(only) is only[0]


def test_prefers_less_outstanding() -> None:
    p2c = PowerOfTwoChoices(random.Random(1))
    replicas = _replicas([0, 10, 10])
    picks = Counter(p2c.pick(replicas).id for _ in range(300))  # type: ignore[union-attr]
    # r0 wins every pair it is in (2 of 3 pairs), so about 2/3 of picks.
    assert picks["r0"] > 150


def test_never_picks_the_most_loaded_of_two() -> None:
    p2c = PowerOfTwoChoices(random.Random(7))
    replicas = _replicas([3, 9])
    assert all(p2c.pick(replicas) is replicas[0] for _ in range(50))


def test_tie_broken_by_latency() -> None:
    p2c = PowerOfTwoChoices(random.Random(3))
    replicas = _replicas([1, 1])
    replicas[0].ewma_latency_s = 0.5
    replicas[1].ewma_latency_s = 0.01
    assert p2c.pick(replicas) is replicas[1]


def test_every_pair_is_drawn_about_equally_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two candidates compared are distinct, and every pair is as likely as any other."""
    compared: list[str] = []

    def load_of(replica: Loaded) -> tuple[float, float]:
        compared.append(cast(Replica, replica).id)
        return (0.0, 0.0)

    monkeypatch.setattr(selection, "_load", load_of)
    p2c = PowerOfTwoChoices(random.Random(11))
    replicas = _replicas([0, 0, 0, 0])
    pairs: Counter[frozenset[str]] = Counter()
    for _ in range(6000):
        compared.clear()
        p2c.pick(replicas)
        assert len(set(compared)) == 2
        pairs[frozenset(compared)] += 1
    assert len(pairs) == 6  # all C(4, 2) pairs
    assert all(800 < n < 1200 for n in pairs.values()), pairs


def _reported(replica: Replica, queue: float, at: float) -> None:
    replica.report_load(LoadReport(queue), at)


def test_a_deep_reported_queue_is_passed_over_while_fresh() -> None:
    p2c = PowerOfTwoChoices(random.Random(5))
    busy, idle = _replicas([0, 2])  # this gateway sends the busy one less
    _reported(busy, 30, at=100.0)
    _reported(idle, 0, at=100.0)
    assert all(p2c.pick([busy, idle], fresh_after=99.0) is idle for _ in range(50))
    # the same readings, stale: least outstanding again (an unknown queue is not empty)
    assert all(p2c.pick([busy, idle], fresh_after=101.0) is busy for _ in range(50))
    assert all(p2c.pick([busy, idle]) is busy for _ in range(50))  # no load awareness


def test_a_pair_with_one_stale_reading_is_compared_as_without_reports() -> None:
    p2c = PowerOfTwoChoices(random.Random(5))
    busy, quiet = _replicas([0, 1])
    _reported(busy, 30, at=100.0)  # fresh, deep
    _reported(quiet, 0, at=10.0)  # stale: not taken for an empty queue
    assert all(p2c.pick([busy, quiet], fresh_after=99.0) is busy for _ in range(50))


def test_reported_queue_adds_to_own_outstanding_and_weight_divides() -> None:
    p2c = PowerOfTwoChoices(random.Random(2))
    a, b = _replicas([4, 0])
    _reported(a, 1, at=5.0)  # 1 + 4 + 1 = 6
    _reported(b, 4, at=5.0)  # 4 + 0 + 1 = 5
    assert all(p2c.pick([a, b], fresh_after=0.0) is b for _ in range(20))
    b.set_weight(0.5)  # 10
    assert all(p2c.pick([a, b], fresh_after=0.0) is a for _ in range(20))
    a.set_weight(0.5)  # 12 against 10
    b.ewma_latency_s, a.ewma_latency_s = 0.5, 0.1
    assert all(p2c.pick([a, b], fresh_after=0.0) is b for _ in range(20))


def test_equal_reported_load_is_broken_by_latency() -> None:
    p2c = PowerOfTwoChoices(random.Random(2))
    a, b = _replicas([0, 0])
    _reported(a, 3, at=5.0)
    _reported(b, 3, at=5.0)
    a.ewma_latency_s, b.ewma_latency_s = 0.2, 0.1
    assert all(p2c.pick([a, b], fresh_after=0.0) is b for _ in range(20))


def test_an_older_reading_never_replaces_a_newer_one() -> None:
    (replica,) = _replicas([0])
    _reported(replica, 7, at=10.0)
    _reported(replica, 1, at=9.0)
    assert replica.reported_queue == 7 and replica.load_at == 10.0
    assert replica.fresh_load(11.0, stale_s=2.0) is not None
    assert replica.fresh_load(12.5, stale_s=2.0) is None

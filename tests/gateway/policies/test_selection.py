from __future__ import annotations

import random
from collections import Counter
from typing import cast

import pytest

from gateway.config.endpoint import Endpoint
from gateway.policies import selection
from gateway.policies.selection import Loaded, PowerOfTwoChoices
from gateway.upstream.replica import Replica


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

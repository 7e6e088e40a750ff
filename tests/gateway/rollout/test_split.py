"""The canary's split serves exactly its share, evenly, from a random first offset."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.rollout.split import SmoothSplit


@given(st.floats(0.01, 99.99), st.integers(0, 2**32), st.integers(1, 5000))
def test_every_prefix_of_requests_holds_the_share_within_one(
    percent: float, seed: int, n: int
) -> None:
    split = SmoothSplit(random.Random(seed))
    taken = sum(split.take(percent) for _ in range(n))
    assert abs(taken - n * percent / 100) <= 1


def test_one_percent_is_one_request_in_each_hundred() -> None:
    split = SmoothSplit(random.Random(7))
    picks = [i for i in range(1000) if split.take(1.0)]
    assert len(picks) == 10
    assert all(b - a == 100 for a, b in pairwise(picks))


@pytest.mark.parametrize(("percent", "expected"), [(0, 0), (100, 50), (150, 50), (-1, 0)])
def test_the_ends_take_none_or_all(percent: float, expected: int) -> None:
    split = SmoothSplit(random.Random(3))
    assert sum(split.take(percent) for _ in range(50)) == expected


def test_gateways_seeded_apart_pick_different_requests() -> None:
    first, second = SmoothSplit(random.Random(1)), SmoothSplit(random.Random(2))
    mine = [i for i in range(200) if first.take(5.0)]
    theirs = [i for i in range(200) if second.take(5.0)]
    assert mine != theirs

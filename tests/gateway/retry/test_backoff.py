from __future__ import annotations

import random

import pytest
from tenacity import RetryCallState, Retrying, stop_after_attempt
from tenacity.wait import wait_fixed

from gateway.retry.backoff import FullJitter


def _after(tries: int) -> RetryCallState:
    """tenacity's state once ``tries`` tries have failed (its ``attempt_number``)."""
    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = tries
    return state


def test_full_jitter_stays_under_the_exponential_ceiling_and_cap() -> None:
    jitter = FullJitter(0.025, 0.25, random.Random(1))
    for tries, ceiling in enumerate([0.025, 0.05, 0.1, 0.2, 0.25, 0.25], start=1):
        waits = [jitter(_after(tries)) for _ in range(200)]
        assert all(0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling * 0.8  # full jitter uses the whole range


def test_a_huge_try_count_waits_at_most_the_cap() -> None:
    jitter = FullJitter(0.025, 0.25, random.Random(2))
    assert all(0 <= jitter(_after(10_000)) <= 0.25 for _ in range(50))


def test_seeded_jitter_is_reproducible() -> None:
    a = FullJitter(0.025, 0.25, random.Random(3))
    b = FullJitter(0.025, 0.25, random.Random(3))
    assert [a(_after(3)) for _ in range(5)] == [b(_after(3)) for _ in range(5)]


def test_tenacity_drives_it_and_composes_it() -> None:
    """As a tenacity ``wait``: tenacity's own loop sleeps it, by its retry state, and ``+``
    adds another wait."""
    slept: list[float] = []
    retrying = Retrying(
        wait=FullJitter(0.025, 0.25, random.Random(4)) + wait_fixed(1.0),
        stop=stop_after_attempt(4),
        sleep=slept.append,
        reraise=True,
    )
    with pytest.raises(ConnectionError):
        retrying(_always_fails)
    assert len(slept) == 3
    for wait, ceiling in zip(slept, [0.025, 0.05, 0.1], strict=True):
        assert 1.0 <= wait <= 1.0 + ceiling


def _always_fails() -> None:
    raise ConnectionError("refused")

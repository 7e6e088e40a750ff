"""The token bucket on a fake clock: burst, refill, the wait it reports, and its bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.admission.token_bucket import TokenBucket
from tests.support.clock import FakeClock


def test_a_new_bucket_admits_its_burst_then_says_how_long_to_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take() == pytest.approx(0.5)  # one token at 2/s
    clock.advance(0.25)
    assert bucket.take() == pytest.approx(0.25)  # a refusal takes nothing
    clock.advance(0.25)
    assert bucket.take() == 0.0
    assert bucket.take() == pytest.approx(0.5)


def test_refill_stops_at_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=10.0, burst=2, clock=clock)
    clock.advance(3600)
    assert bucket.tokens() == 2.0
    assert [bucket.take() for _ in range(3)][-1] == pytest.approx(0.1)


def test_a_slow_rate_reports_a_long_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate_per_s=0.1, burst=1, clock=clock)
    assert bucket.take() == 0.0
    assert bucket.take() == pytest.approx(10.0)


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_nonsense_is_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst, FakeClock())


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.1, 1000.0),
    burst=st.integers(1, 50),
    gaps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=300),
)
def test_never_more_than_burst_plus_rate_times_t_over_any_interval(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, burst, clock)
    admitted: list[float] = []
    for gap in gaps:
        clock.advance(gap)
        if bucket.take() == 0.0:
            admitted.append(clock.now())
    for i, start in enumerate(admitted):  # every interval [start, end] between admissions
        for j in range(i, len(admitted)):
            count = j - i + 1
            assert count <= burst + rate * (admitted[j] - start) + 1e-6


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(0.1, 1000.0),
    burst=st.integers(1, 50),
    gaps=st.lists(st.floats(0.0, 2.0), min_size=1, max_size=100),
)
def test_the_wait_it_reports_is_exactly_when_the_next_request_passes(
    rate: float, burst: int, gaps: list[float]
) -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate, burst, clock)
    for gap in gaps:
        clock.advance(gap)
        wait = bucket.take()
        if wait:
            assert 0 < wait <= 1.0 / rate + 1e-9
            clock.advance(wait * (1 + 1e-9) + 1e-12)
            assert bucket.take() == 0.0

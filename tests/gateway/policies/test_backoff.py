from __future__ import annotations

import random

from gateway.policies.backoff import FullJitter


def test_full_jitter_stays_under_the_exponential_ceiling_and_cap() -> None:
    jitter = FullJitter(0.025, 0.25, random.Random(1))
    for n, ceiling in enumerate([0.025, 0.05, 0.1, 0.2, 0.25, 0.25]):
        waits = [jitter.for_retry(n) for _ in range(200)]
        assert all(0 <= w <= ceiling for w in waits)
        assert max(waits) > ceiling * 0.8  # full jitter uses the whole range


def test_seeded_jitter_is_reproducible() -> None:
    a = FullJitter(0.025, 0.25, random.Random(3))
    b = FullJitter(0.025, 0.25, random.Random(3))
    assert [a.for_retry(2) for _ in range(5)] == [b.for_retry(2) for _ in range(5)]

from __future__ import annotations

import random

from gateway.voting.suspects import SuspectTracker


def _tracker() -> SuspectTracker:
    return SuspectTracker(window=200, min_votes=100, ratio=0.08)


def test_an_honest_version_in_batches_is_never_a_suspect() -> None:
    rng = random.Random(0)
    tracker = _tracker()
    for _ in range(20_000):  # 8-row batches, 2.4 % of rows disagree (the forest's natural rate)
        dissents = sum(rng.random() < 0.024 for _ in range(8))
        assert not tracker.observe("forest-0", 8, dissents)


def test_a_replica_corrupting_ten_percent_becomes_a_suspect_within_a_few_hundred_rows() -> None:
    rng = random.Random(1)
    tracker = _tracker()
    for row in range(1, 1000):
        if tracker.observe("mlp-0", 1, int(rng.random() < 0.10 + 0.013)):
            assert row <= 600
            return
    raise AssertionError("never became a suspect")


def test_needs_min_votes_and_forgives() -> None:
    tracker = _tracker()
    assert not tracker.observe("r", 50, 50)
    assert tracker.observe("r", 50, 50)
    tracker.forgive("r")
    assert tracker.snapshot() == {}
    assert not tracker.observe("r", 10, 10)
    assert tracker.snapshot()["r"] == {"votes": 10, "dissents": 10, "recent_dissent_ratio": 1.0}

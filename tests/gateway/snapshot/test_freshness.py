"""Staleness on a fake clock: stale until heard, fresh for ``stale_s`` after each message."""

from __future__ import annotations

from gateway.snapshot.freshness import STALE_S, Freshness
from tests.support.clock import FakeClock


def test_a_worker_that_never_heard_from_control_is_stale() -> None:
    assert Freshness(FakeClock()).stale


def test_stale_once_nothing_came_for_longer_than_stale_s() -> None:
    clock = FakeClock()
    freshness = Freshness(clock)
    freshness.heard()
    clock.advance(STALE_S)
    assert not freshness.stale
    clock.advance(0.001)
    assert freshness.stale
    freshness.heard()
    assert not freshness.stale

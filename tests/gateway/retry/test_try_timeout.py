from __future__ import annotations

import pytest

from gateway.config.policies import TryTimeoutConfig
from gateway.retry.try_timeout import try_timeout
from gateway.upstream.latency import LatencyWindow

CONFIG = TryTimeoutConfig(quantile=0.99, multiplier=4, min_ms=25, min_samples=10, cold_ms=200)


def _window(latency_s: float, samples: int) -> LatencyWindow:
    window = LatencyWindow()
    for _ in range(samples):
        window.record(latency_s)
    return window


def test_learned_from_the_pool_p99() -> None:
    assert try_timeout(CONFIG, _window(0.010, 50), 1.0, True) == pytest.approx(0.040)


def test_never_below_the_floor_nor_above_the_time_left() -> None:
    assert try_timeout(CONFIG, _window(0.001, 50), 1.0, True) == pytest.approx(0.025)
    assert try_timeout(CONFIG, _window(0.5, 50), 0.3, True) == pytest.approx(0.3)


def test_cold_start_uses_the_prior() -> None:
    assert try_timeout(CONFIG, _window(0.010, 3), 1.0, True) == pytest.approx(0.2)


def test_last_try_gets_all_the_time_left() -> None:
    assert try_timeout(CONFIG, _window(0.010, 50), 0.8, False) == 0.8
    off = TryTimeoutConfig(adaptive=False)
    assert try_timeout(off, _window(0.010, 50), 0.8, True) == 0.8

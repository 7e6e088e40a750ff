"""The loop-lag signal copies are shed on: the worst recent overshoot, decaying."""

from __future__ import annotations

import random

import pytest

from gateway.config.models import ModelConfig
from gateway.config.rollout import RolloutConfig
from gateway.rollout.controller import Rollouts
from gateway.rollout.lag import INTERVAL_S, LoopLag
from tests.support.clock import FakeClock


def test_a_spike_is_seen_at_once_and_fades() -> None:
    lag = LoopLag(FakeClock())
    lag.sample(INTERVAL_S + 0.050)
    assert lag.lag_s == pytest.approx(0.050)
    for _ in range(25):  # half a second of on-time samples
        lag.sample(INTERVAL_S)
    assert lag.lag_s < 0.005


def test_copies_are_shed_while_the_loop_lags_past_the_bound() -> None:
    config = RolloutConfig(candidate="next", shed_loop_lag_ms=5)
    rollouts = Rollouts(
        {"digits": ModelConfig(pool="now", rollout=config)},
        FakeClock(),
        random.Random(1),
        decide=lambda *a, **k: None,  # type: ignore[arg-type]
        known=lambda key: None,
        audit=lambda e: None,
        burning=lambda m: False,
        synced=lambda: True,
        origin="gw",
    )
    lag = LoopLag(FakeClock())
    rollouts.loop_lag = lambda: lag.lag_s
    assert not rollouts.busy("digits")
    lag.sample(INTERVAL_S + 0.008)
    assert rollouts.busy("digits")

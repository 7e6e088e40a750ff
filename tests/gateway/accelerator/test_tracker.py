"""Hysteresis and staleness of one replica's accelerator: a flapping reading drains once and
does not flap the traffic; a stale reading neither drains nor restores."""

from __future__ import annotations

from dataclasses import replace

from gateway.accelerator.tracker import AcceleratorTracker, Want
from gateway.config.accelerator import AcceleratorConfig
from v2proto.dcgm import THROTTLE_HW_THERMAL, Reading

GOOD = Reading("0", "GPU-1", temperature_c=60, ecc_dbe_total=0, slowdown_c=90, shutdown_c=95)
HOT = replace(GOOD, temperature_c=91)
CONFIG = AcceleratorConfig(interval_s=0.5, healthy_for_s=5.0, lead_s=0.0)


def drained_state() -> AcceleratorTracker:
    """A replica that asked to be drained at t=0 (as the sampler records it)."""
    state = AcceleratorTracker(CONFIG)
    judgement = state.observe(0.0, HOT)
    assert judgement.want is Want.DRAIN and judgement.drain is not None
    state.drained = judgement.drain
    return state


def test_a_flapping_reading_drains_once_and_is_not_restored_while_it_flaps() -> None:
    state = drained_state()
    wants = [state.observe(t * 0.5, HOT if t % 2 else GOOD).want for t in range(1, 200)]
    assert Want.RESTORE not in wants  # 100 s of flapping: out the whole time
    # the sampler asks again on each bad sample, but the drain holds: one decision in all


def test_restored_after_healthy_for_s_of_good_samples() -> None:
    state = drained_state()
    wants = {t: state.observe(t * 0.5, GOOD).want for t in range(1, 20)}
    first = min(t for t, want in wants.items() if want is Want.RESTORE)
    assert first * 0.5 - 0.5 >= CONFIG.healthy_for_s  # good since the first good sample


def test_one_bad_sample_restarts_the_count() -> None:
    state = drained_state()
    for t in range(1, 9):
        assert state.observe(t * 0.5, GOOD).want is Want.NOTHING
    assert state.observe(4.5, HOT).want is Want.DRAIN
    assert all(state.observe(5.0 + t * 0.5, GOOD).want is Want.NOTHING for t in range(10))


def test_a_stale_reading_is_unknown_and_never_healthy() -> None:
    state = drained_state()
    assert state.observe(1.0, GOOD).want is Want.NOTHING
    for t in (2.0, 3.0, 9.0):  # the source stops answering: 8 s without a reading
        assert state.failed(t, "connect refused").want is Want.NOTHING
    assert state.snapshot(9.0)["state"] == "unknown" and state.snapshot(9.0)["reading"] is None
    # back: the good streak starts again now, not at t=1
    wants = {9.5 + i * 0.5: state.observe(9.5 + i * 0.5, GOOD).want for i in range(12)}
    assert min(t for t, want in wants.items() if want is Want.RESTORE) == 14.5


def test_a_source_without_the_device_is_unknown() -> None:
    state = AcceleratorTracker(CONFIG)
    assert state.observe(0.0, None).want is Want.NOTHING
    assert state.snapshot(0.0)["error"] == "no accelerator readings"
    assert state.stale(0.0)


def test_throttling_lowers_the_weight_until_healthy_for_s_without_it() -> None:
    state = AcceleratorTracker(CONFIG)
    throttled = replace(GOOD, throttle_reasons=THROTTLE_HW_THERMAL)
    assert state.observe(0.0, throttled).weight == CONFIG.limits.throttled_weight
    weights = [state.observe(t * 0.5, throttled if t % 2 else GOOD).weight for t in range(1, 40)]
    assert set(weights) == {CONFIG.limits.throttled_weight}  # flapping: stays lowered
    weights = [state.observe(20 + t * 0.5, GOOD).weight for t in range(0, 12)]
    assert weights[-1] == 1.0 and weights[0] == CONFIG.limits.throttled_weight


def test_a_page_seen_again_is_fresh_but_no_second_point() -> None:
    state = AcceleratorTracker(CONFIG)
    state.observe(0.0, GOOD)
    for t in (0.5, 1.0, 1.5, 2.0):
        assert state.observe(t, GOOD, new=False).want is Want.NOTHING
    assert len(state.samples) == 1 and not state.stale(2.0)
    hot = drained_state()
    assert hot.observe(0.5, HOT, new=False).want is Want.DRAIN  # the verdict stands

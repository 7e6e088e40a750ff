"""When an accelerator needs its next reading soon: near a limit by margin, trend or rate, or
a rule acting on it; otherwise the idle interval."""

from __future__ import annotations

from dataclasses import replace

from gateway.accelerator.need import Margins, near
from gateway.accelerator.rules import Sample, Window
from gateway.accelerator.tracker import AcceleratorTracker
from gateway.config.accelerator import AcceleratorConfig, AcceleratorLimits
from v2proto.dcgm import THROTTLE_HW_THERMAL, Reading

COOL = Reading("0", "GPU-1", temperature_c=60, ecc_sbe_total=0, ecc_dbe_total=0, xid=0,
               throttle_reasons=0, slowdown_c=90)  # fmt: skip
MARGINS = Margins(margin_c=10.0, margin_share=0.5)


def window(*readings: Reading, step_s: float = 1.0, lead_s: float = 5.0) -> Window:
    samples = [Sample(i * step_s, r) for i, r in enumerate(readings)]
    return Window(samples, AcceleratorLimits(sbe_per_minute=60), lead_s)


def test_far_from_every_limit_is_not_near() -> None:
    assert near(window(COOL, COOL, COOL), MARGINS) is None
    warming = [replace(COOL, temperature_c=60 + i) for i in range(3)]  # 1 °C/s, 20 s away
    assert near(window(*warming), MARGINS) is None


def test_within_the_margin_or_a_trend_into_it_within_lead_s_is_near() -> None:
    assert near(window(replace(COOL, temperature_c=80)), MARGINS) is not None
    rising = [replace(COOL, temperature_c=70 + 3 * i) for i in range(3)]  # 76, 3 °C/s: 1.3 s
    why = near(window(*rising), MARGINS)
    assert why is not None and "rising" in why


def test_an_sbe_rate_over_the_margin_share_and_acting_rules_are_near() -> None:
    sbe = [replace(COOL, ecc_sbe_total=40.0 * i) for i in range(2)]  # 2,400/min
    assert near(window(*sbe), MARGINS) is not None
    slow_sbe = [replace(COOL, ecc_sbe_total=float(i)) for i in range(3)]  # 60/min > 30
    assert near(window(*slow_sbe), MARGINS) is not None
    assert near(window(replace(COOL, ecc_sbe_total=0)), MARGINS) is None
    for acting in (
        replace(COOL, ecc_dbe_total=1),
        replace(COOL, xid=79),
        replace(COOL, throttle_reasons=THROTTLE_HW_THERMAL),
    ):
        assert near(window(acting), MARGINS) is not None


def test_a_replica_is_urgent_while_near_drained_or_unknown() -> None:
    config = AcceleratorConfig(interval_s=0.1, idle_interval_s=1.0, healthy_for_s=2.0)
    state = AcceleratorTracker(config)
    assert state.urgent(0.0)  # no reading yet: unknown
    state.observe(0.0, COOL)
    assert not state.urgent(0.5)
    assert state.urgent(3.5)  # stale: 3 idle intervals without a reading
    state.observe(4.0, replace(COOL, temperature_c=85))
    assert state.urgent(4.1) and state.snapshot(4.1)["near"] is not None
    state.observe(5.0, COOL)
    assert not state.urgent(5.1)

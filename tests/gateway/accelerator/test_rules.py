"""The accelerator rules as a table: each row of `RULES` case by case, and docs/hardware.md's
table checked against it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from gateway.accelerator.rules import CRITICAL_XIDS, RULES, Sample, Window, match, trend
from gateway.config.accelerator import AcceleratorLimits
from v2proto.dcgm import THROTTLE_HW_THERMAL, THROTTLE_SW_POWER_CAP, Reading

GOOD = Reading("0", "GPU-1", temperature_c=60, power_w=300, ecc_sbe_total=0, ecc_dbe_total=0,
               xid=0, row_remap_pending=0, row_remap_failure=0, throttle_reasons=0,
               slowdown_c=90, shutdown_c=95)  # fmt: skip
LIMITS = AcceleratorLimits()


def window(*readings: Reading, step_s: float = 0.5, lead_s: float = 10.0) -> Window:
    return Window([Sample(i * step_s, r) for i, r in enumerate(readings)], LIMITS, lead_s)


def ramp(start: float, per_sample: float, n: int) -> list[Reading]:
    return [replace(GOOD, temperature_c=start + i * per_sample) for i in range(n)]


@dataclass(frozen=True)
class Case:
    row: str  # the RULES row this case is about
    name: str
    window: Window
    decides: str | None  # the signal of the drain (or weight) expected; None: nothing


CASES = [
    Case("ecc_dbe", "one uncorrectable error", window(replace(GOOD, ecc_dbe_total=1)), "ecc_dbe"),
    Case("ecc_dbe", "none", window(GOOD), None),
    Case("xid", "79: fell off the bus", window(replace(GOOD, xid=79)), "xid"),
    Case("xid", "13: a program's fault, not the GPU's", window(replace(GOOD, xid=13)), None),
    Case("row_remap", "pending", window(replace(GOOD, row_remap_pending=1)), "row_remap"),
    Case("row_remap", "failed", window(replace(GOOD, row_remap_failure=1)), "row_remap"),
    Case("row_remap", "none pending, none failed", window(GOOD), None),
    Case("temperature", "at slowdown", window(replace(GOOD, temperature_c=90)), "temperature"),
    Case("temperature", "under slowdown, flat", window(*[replace(GOOD, temperature_c=89)] * 4),
         None),
    Case("temperature", "no slowdown known, none configured",
         window(replace(GOOD, temperature_c=120, slowdown_c=None)), None),
    Case("temperature_trend", "+1 °C a sample from 80: 90 in 5 s", window(*ramp(80, 1, 6)),
         "temperature_trend"),
    Case("temperature_trend", "+1 °C a sample from 60: 90 in 12.5 s, lead 10 s",
         window(*ramp(60, 1, 6)), None),
    Case("temperature_trend", "cooling", window(*ramp(89, -1, 6)), None),
    Case("temperature_trend", "two samples are no trend", window(*ramp(85, 2, 2)), None),
    Case("ecc_sbe_rate", "2 per second is 120/min",
         window(*[replace(GOOD, ecc_sbe_total=i) for i in range(5)]), "ecc_sbe_rate"),
    Case("ecc_sbe_rate", "a few, slowly",
         window(*[replace(GOOD, ecc_sbe_total=i // 4) for i in range(5)]), None),
    Case("throttle", "hardware thermal slowdown",
         window(replace(GOOD, throttle_reasons=THROTTLE_HW_THERMAL)), "throttle"),
    Case("throttle", "power cap", window(replace(GOOD, throttle_reasons=THROTTLE_SW_POWER_CAP)),
         "throttle"),
    Case("throttle", "idle clocks (bit 0x1) are no throttling",
         window(replace(GOOD, throttle_reasons=1)), None),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.row}: {c.name}")
def test_each_rule(case: Case) -> None:
    drain, weight = match(case.window)
    signals = {e.signal for e in (drain, weight) if e is not None}
    assert signals == ({case.decides} if case.decides else set())


def test_every_rule_has_a_case_that_fires_and_one_that_does_not() -> None:
    assert {c.row for c in CASES} == {rule.signal for rule in RULES}
    assert {c.decides for c in CASES} - {None} == {rule.signal for rule in RULES}
    assert {c.row for c in CASES if c.decides is None} == {rule.signal for rule in RULES}


def test_the_first_drain_rule_in_the_table_speaks() -> None:
    both = replace(GOOD, ecc_dbe_total=2, temperature_c=93, throttle_reasons=THROTTLE_HW_THERMAL)
    drain, weight = match(window(both))
    assert drain is not None and drain.signal == "ecc_dbe" and drain.action == "drain now"
    assert weight is not None and weight.action == "lower weight"


def test_evidence_names_the_reading_and_the_threshold() -> None:
    drain, _ = match(window(replace(GOOD, temperature_c=93)))
    assert drain is not None
    assert (drain.reading, drain.threshold) == (93, 90)
    assert drain.text == "temperature 93 °C, slowdown at 90 °C"


def test_the_configured_slowdown_serves_a_device_that_reports_none() -> None:
    limits = AcceleratorLimits(slowdown_c=80)
    drain, _ = match(Window([Sample(0, replace(GOOD, temperature_c=85, slowdown_c=None))],
                            limits, 10))  # fmt: skip
    assert drain is not None and drain.threshold == 80


def test_the_trend_is_a_least_squares_line() -> None:
    fit = trend([(0, 1.0), (1, 3.0), (2, 5.0)])
    assert fit == pytest.approx((5.0, 2.0))
    noisy = trend([(0, 80.0), (1, 82.0), (2, 81.0), (3, 83.0)])
    assert noisy is not None and noisy[1] == pytest.approx(0.8)


def test_critical_xids_are_the_documented_ones() -> None:
    assert sorted(CRITICAL_XIDS) == [48, 63, 64, 74, 79, 92, 94, 95]


DOCS = Path(__file__).parents[3] / "docs" / "hardware.md"


def _doc_rows() -> list[list[str]]:
    section = DOCS.read_text().split("## The rules", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_docs_list_the_same_rules_in_the_same_order() -> None:
    rows = _doc_rows()
    assert [row[0].strip("`") for row in rows] == [rule.signal for rule in RULES]
    for (_, condition, action), rule in zip(rows, RULES, strict=True):
        assert (condition, action) == (rule.condition, rule.action), rule.signal


def test_a_few_close_samples_of_integer_degrees_are_no_trend() -> None:
    """60, 61, 61 °C within 0.2 s fit a steep line; over less than half of fit_s it is noise."""
    quick = [Sample(t, replace(GOOD, temperature_c=c)) for t, c in ((0, 60), (0.1, 61), (0.2, 61))]
    assert match(Window(quick, LIMITS, 10.0, fit_s=3.0)) == (None, None)
    spread = [Sample(t * 0.5, r) for t, r in enumerate(ramp(80, 1, 4))]
    drain, _ = match(Window(spread, LIMITS, 10.0, fit_s=3.0))
    assert drain is not None and drain.signal == "temperature_trend"

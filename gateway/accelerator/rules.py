"""The accelerator rules: which accelerator readings take a replica out of traffic, as data.

Beside the fault judge (`gateway.faults.judge`), which judges answers, these read the GPU
before it fails. `RULES` is the table, in order, read by `match`: each row names a signal, its
condition in words (the table in ``docs/hardware.md`` is checked against it by a test) and
the action:

- ``drain now``: the device is failing (uncorrectable ECC, a critical XID, rows to remap or a
  remap failed, temperature at or over slowdown);
- ``drain early``: it is about to (the temperature's least-squares trend over the last
  ``fit_s``, from samples spread over at least half of it, reaches slowdown within
  ``lead_s``; correctable ECC errors per minute over the limit);
- ``lower weight``: it is throttled (thermal or power), so it gets fewer requests.

`match` is pure: a window of recent samples and the limits in, the first matching rules' ``
Evidence`` out (the signal, the reading, the threshold, and a line for people). When to act on
it (hysteresis, caps) is `gateway.accelerator.tracker`'s. The readings it sees were vetted
(`gateway.policies.accelerator_values`); the rules that make integers of them check anyway, so a
reading built elsewhere cannot make one raise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.config.accelerator import AcceleratorLimits
from v2proto.dcgm import POWER_THROTTLE, THERMAL_THROTTLE, Reading

Action = Literal["drain now", "drain early", "lower weight"]
DRAINS: frozenset[str] = frozenset({"drain now", "drain early"})
# XIDs that mean the GPU or its memory is failing (NVIDIA's XID catalogue: 48 DBE, 63/64 row
# remapping, 74 NVLink, 79 fallen off the bus, 92 high SBE rate, 94/95 contained/uncontained
# ECC error).
CRITICAL_XIDS: frozenset[int] = frozenset({48, 63, 64, 74, 79, 92, 94, 95})
MIN_FIT_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class Sample:
    # the gateway's monotonic seconds when it was read
    at: float
    reading: Reading


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why a rule matched: the signal, the reading, the threshold, and a line for people."""

    signal: str
    action: Action
    reading: float
    threshold: float
    text: str

    def to_json(self) -> dict[str, object]:
        return {
            "signal": self.signal,
            "action": self.action,
            "reading": self.reading,
            "threshold": self.threshold,
            "text": self.text,
        }


@dataclass(frozen=True, slots=True)
class Window:
    """The samples the rules read (oldest first) and what the config says about them."""

    samples: Sequence[Sample]
    limits: AcceleratorLimits
    lead_s: float
    # a trend needs samples over at least half of this
    fit_s: float = 0.0

    @property
    def last(self) -> Reading:
        return self.samples[-1].reading

    def slowdown_c(self) -> float | None:
        own = self.last.slowdown_c
        return own if own is not None else self.limits.slowdown_c


Check = Callable[[Window], Evidence | None]


@dataclass(frozen=True, slots=True)
class AcceleratorRule:
    signal: str
    # in words, as the docs' table says it
    condition: str
    action: Action
    check: Check


def _num(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _dbe(w: Window) -> Evidence | None:
    dbe = w.last.ecc_dbe_total
    if dbe is None or dbe <= 0:
        return None
    return Evidence("ecc_dbe", "drain now", dbe, 0, f"uncorrectable ECC errors {_num(dbe)}")


def _xid(w: Window) -> Evidence | None:
    xid = w.last.xid
    if xid is None or not math.isfinite(xid) or int(xid) not in CRITICAL_XIDS:
        return None
    return Evidence("xid", "drain now", xid, xid, f"critical XID {int(xid)}")


def _row_remap(w: Window) -> Evidence | None:
    reading = w.last
    if reading.row_remap_failure is not None and reading.row_remap_failure >= 1:
        return Evidence("row_remap", "drain now", 1, 1, "row remapping failed")
    if reading.row_remap_pending is not None and reading.row_remap_pending >= 1:
        return Evidence("row_remap", "drain now", 1, 1, "row remap pending")
    return None


def _temperature(w: Window) -> Evidence | None:
    temp, slowdown = w.last.temperature_c, w.slowdown_c()
    if temp is None or slowdown is None or temp < slowdown:
        return None
    text = f"temperature {_num(temp)} °C, slowdown at {_num(slowdown)} °C"
    return Evidence("temperature", "drain now", temp, slowdown, text)


def trend(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares line through ``(t, y)``: (value at the last t, slope per second)."""
    if len(points) < MIN_FIT_SAMPLES:
        return None
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var <= 0:
        return None
    slope = sum((t - mean_t) * (y - mean_y) for t, y in points) / var
    return mean_y + slope * (points[-1][0] - mean_t), slope


def _temperature_trend(w: Window) -> Evidence | None:
    slowdown = w.slowdown_c()
    points = [
        (s.at, s.reading.temperature_c) for s in w.samples if s.reading.temperature_c is not None
    ]
    spread = points[-1][0] - points[0][0] if points else 0.0
    # a few close samples of integer °C are no trend
    enough = spread >= w.fit_s / 2
    fit = trend(points) if slowdown is not None and enough else None
    if fit is None or slowdown is None:
        return None
    now_c, slope = fit
    if slope <= 0 or now_c >= slowdown:
        # cooling or flat; at slowdown the temperature rule speaks
        return None
    eta_s = (slowdown - now_c) / slope
    if eta_s > w.lead_s:
        return None
    text = (
        f"temperature {_num(points[-1][1])} °C rising {slope:.2f} °C/s: slowdown at "
        f"{_num(slowdown)} °C in {eta_s:.1f} s"
    )
    return Evidence("temperature_trend", "drain early", round(eta_s, 3), w.lead_s, text)


def _sbe_rate(w: Window) -> Evidence | None:
    counts = [
        (s.at, s.reading.ecc_sbe_total) for s in w.samples if s.reading.ecc_sbe_total is not None
    ]
    if len(counts) < 2 or counts[-1][0] <= counts[0][0]:
        return None
    per_minute = max(0.0, counts[-1][1] - counts[0][1]) / (counts[-1][0] - counts[0][0]) * 60
    limit = w.limits.sbe_per_minute
    if per_minute <= limit:
        return None
    text = f"correctable ECC errors {per_minute:.0f}/min, limit {_num(limit)}/min"
    return Evidence("ecc_sbe_rate", "drain early", round(per_minute, 3), limit, text)


def _throttle(w: Window) -> Evidence | None:
    reasons = w.last.throttle_reasons
    if reasons is None or not math.isfinite(reasons):
        return None
    if not int(reasons) & (THERMAL_THROTTLE | POWER_THROTTLE):
        return None
    kind = "thermal" if int(reasons) & THERMAL_THROTTLE else "power"
    weight = w.limits.throttled_weight
    text = f"{kind} throttling (reasons 0x{int(reasons):x}): weight {_num(weight)}"
    return Evidence("throttle", "lower weight", reasons, weight, text)


RULES: tuple[AcceleratorRule, ...] = (
    AcceleratorRule("ecc_dbe", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0", "drain now", _dbe),
    AcceleratorRule(
        "xid", "DCGM_FI_DEV_XID_ERRORS in 48, 63, 64, 74, 79, 92, 94, 95", "drain now", _xid
    ),
    AcceleratorRule(
        "row_remap",
        "DCGM_FI_DEV_ROW_REMAP_PENDING or DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "drain now",
        _row_remap,
    ),
    AcceleratorRule("temperature", "DCGM_FI_DEV_GPU_TEMP ≥ slowdown", "drain now", _temperature),
    AcceleratorRule(
        "temperature_trend",
        "fitted DCGM_FI_DEV_GPU_TEMP reaches slowdown within lead_s",
        "drain early",
        _temperature_trend,
    ),
    AcceleratorRule(
        "ecc_sbe_rate",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL rate > sbe_per_minute",
        "drain early",
        _sbe_rate,
    ),
    AcceleratorRule(
        "throttle",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS has a thermal or power bit",
        "lower weight",
        _throttle,
    ),
)


def match(window: Window) -> tuple[Evidence | None, Evidence | None]:
    """(the first rule that drains, the first that lowers weight), each None if none did."""
    drain = weight = None
    for rule in RULES:
        if (drain is not None and rule.action in DRAINS) or (weight and rule.action not in DRAINS):
            continue
        evidence = rule.check(window)
        if evidence is None:
            continue
        if rule.action in DRAINS:
            drain = evidence
        else:
            weight = evidence
    return drain, weight

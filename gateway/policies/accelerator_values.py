"""Which accelerator readings are believed: the range a device can report, per DCGM field.

A replica or an exporter is an untrusted peer, and a sensor can fail: a value that no device
can report (NaN, an infinity, a negative count, 10,000 °C, a non-integer XID) is not evidence
of anything. `BOUNDS` is the table (docs/hardware.md's is checked against it); `believable`
reads it. A value outside is dropped from the reading as if the page did not carry it, and
the sampler counts and logs it; the device's other readings still count, so one bad value
never hides a hot GPU (the rules only ever see finite numbers in range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

UINT64_MAX = float(2**64 - 1)


@dataclass(frozen=True, slots=True)
class Bound:
    least: float
    most: float
    # an integer: a count, an id or a bit mask
    whole: bool = False


BOUNDS: dict[str, Bound] = {
    "DCGM_FI_DEV_GPU_TEMP": Bound(0, 200),
    "DCGM_FI_DEV_POWER_USAGE": Bound(0, 10_000),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": Bound(0, UINT64_MAX, whole=True),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": Bound(0, UINT64_MAX, whole=True),
    "DCGM_FI_DEV_XID_ERRORS": Bound(0, 65_535, whole=True),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": Bound(0, UINT64_MAX, whole=True),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": Bound(0, UINT64_MAX, whole=True),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Bound(0, UINT64_MAX, whole=True),
    "DCGM_FI_DEV_FB_USED": Bound(0, UINT64_MAX),
    "DCGM_FI_DEV_FB_FREE": Bound(0, UINT64_MAX),
    # a slowdown or shutdown limit under 20 °C (NVML's 0: not supported) would drain an idle GPU
    "DCGM_FI_DEV_SLOWDOWN_TEMP": Bound(20, 200),
    "DCGM_FI_DEV_SHUTDOWN_TEMP": Bound(20, 200),
}


def believable(name: str, value: float) -> bool:
    """Whether the field ``name`` (a DCGM metric name in `BOUNDS`) can read ``value``."""
    bound = BOUNDS[name]
    if not math.isfinite(value) or not bound.least <= value <= bound.most:
        return False
    return not bound.whole or value.is_integer()

"""Which accelerator readings are believed: `BOUNDS` row by row, docs/hardware.md's table
checked against it, and the rules never raising on a value that slipped past it."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.accelerator.rules import Sample, Window, match
from gateway.config.accelerator import AcceleratorLimits
from gateway.policies.accelerator_values import BOUNDS, UINT64_MAX, believable
from v2proto.dcgm import FIELDS, Field, Reading

DOCS = Path(__file__).parents[3] / "docs" / "hardware.md"
GOOD = Reading("0", "GPU-1", temperature_c=60, slowdown_c=90, shutdown_c=95)


def test_every_field_has_a_bound() -> None:
    assert set(BOUNDS) == {f.name for f in FIELDS}


@pytest.mark.parametrize(
    ("name", "value", "believed"),
    [
        ("DCGM_FI_DEV_GPU_TEMP", 93.0, True),
        ("DCGM_FI_DEV_GPU_TEMP", math.nan, False),
        ("DCGM_FI_DEV_GPU_TEMP", math.inf, False),
        ("DCGM_FI_DEV_GPU_TEMP", 10_000.0, False),
        ("DCGM_FI_DEV_GPU_TEMP", -5.0, False),
        ("DCGM_FI_DEV_POWER_USAGE", 699.5, True),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0.0, True),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", -1.0, False),
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 0.5, False),
        ("DCGM_FI_DEV_XID_ERRORS", 79.0, True),
        ("DCGM_FI_DEV_XID_ERRORS", 79.5, False),
        ("DCGM_FI_DEV_XID_ERRORS", -math.inf, False),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", UINT64_MAX, True),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", math.inf, False),
        ("DCGM_FI_DEV_SLOWDOWN_TEMP", 0.0, False),
        ("DCGM_FI_DEV_SLOWDOWN_TEMP", 87.0, True),
    ],
)
def test_a_value_is_believed_only_within_its_bound(name: str, value: float, believed: bool) -> None:
    assert believable(name, value) is believed


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.attr)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_the_rules_never_raise_on_a_value_that_is_not_a_number(field: Field, value: float) -> None:
    """Vetting happens where a page is read; a reading built elsewhere still cannot make a
    rule raise (``int(nan)``, ``int(inf)``), which would end a sampling loop."""
    changes: dict[str, Any] = {field.attr: value}
    readings = [replace(GOOD, **changes) for _ in range(4)]
    window = Window([Sample(i * 0.5, r) for i, r in enumerate(readings)], AcceleratorLimits(), 10.0)
    match(window)


def _shown(value: float) -> str:
    return "2^64 − 1" if value == UINT64_MAX else f"{value:g}"


def test_the_docs_list_the_same_bounds() -> None:
    section = DOCS.read_text().split("## Bad readings", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    expected = [
        [f"`{name}`", _shown(b.least), _shown(b.most), "yes" if b.whole else "no"]
        for name, b in BOUNDS.items()
    ]
    assert rows == expected

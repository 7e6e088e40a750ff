"""Every metric family is declared in `gateway.telemetry.catalog`, and each name once."""

from __future__ import annotations

import re
from pathlib import Path

from gateway.telemetry.catalog import Catalog

GATEWAY = Path(__file__).resolve().parents[3] / "gateway"
DECLARES = re.compile(r"(?<!class )\b(Counter|Gauge|Histogram)Family\(")  # a call, not the class


def test_no_module_but_the_catalog_declares_a_metric_family() -> None:
    declaring = {
        path.relative_to(GATEWAY).as_posix()
        for path in GATEWAY.rglob("*.py")
        if DECLARES.search(path.read_text(encoding="utf-8"))
    }
    # series.py defines the family classes; only the catalog builds them
    assert declaring == {"telemetry/catalog.py"}, declaring - {"telemetry/catalog.py"}


def test_the_catalog_names_each_family_once_and_holds_the_slo_and_rollout_series() -> None:
    names = [family.name for family in Catalog().families]
    assert len(names) == len(set(names))
    assert {"gateway_slo_burn_rate", "gateway_rollout_phase"} <= set(names)

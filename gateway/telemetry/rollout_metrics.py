"""Rollout series (comparisons, disagreements, shed copies, the candidate's share and phase)
from the `/admin/rollouts` document, set at scrape time as the SLO gauges are.

The counters are the rollout's totals on this instance (carried across reloads, so they only
grow while the process lives). Agreement over a window is a query:
``rate(gateway_rollout_comparisons_total{result="agree"}[5m])
/ rate(gateway_rollout_comparisons_total[5m])``. Every series names the rollout by ``model``
and ``candidate`` (the candidate pool). The families are declared in `gateway.telemetry.catalog`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.telemetry.catalog import ROLLOUT_PHASES, RolloutFamilies


def set_rollouts(families: RolloutFamilies, doc: Mapping[str, Any]) -> None:
    """Sets every series from ``Rollouts.snapshot()``."""
    for model, rollout in doc.get("rollouts", {}).items():
        labels = (model, str(rollout["candidate"]))
        total = rollout["evidence"]["total"]
        compared, agreed = int(total["compared"]), int(total["agreed"])
        families.comparisons.labels(*labels, "agree").set(agreed)
        families.comparisons.labels(*labels, "disagree").set(compared - agreed)
        for output, count in total["disagreements"].items():
            families.disagreements.labels(*labels, str(output)).set(count)
        families.copies.labels(*labels, "failed").set(total["compare_errors"])
        families.copies.labels(*labels, "shed").set(total["shadow_shed"])
        requests, errors = int(total["candidate_requests"]), int(total["candidate_errors"])
        families.candidate.labels(*labels, "ok").set(requests - errors)
        families.candidate.labels(*labels, "error").set(errors)
        families.share.labels(*labels).set(float(rollout["share_percent"]))
        for phase in ROLLOUT_PHASES:
            families.phase.labels(*labels, phase).set(1.0 if rollout["phase"] == phase else 0.0)

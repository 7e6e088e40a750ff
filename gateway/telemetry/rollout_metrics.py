"""Rollout series (comparisons, disagreements, shed copies, the candidate's share and phase)
from the `/admin/rollouts` document, set at scrape time as the SLO gauges are.

The counters are the rollout's totals on this instance (carried across reloads, so they only
grow while the process lives). Agreement over a window is a query:
``rate(gateway_rollout_comparisons_total{result="agree"}[5m])
/ rate(gateway_rollout_comparisons_total[5m])``. Every series names the rollout by ``model``
and ``candidate`` (the candidate pool).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.telemetry.series import CounterFamily, GaugeFamily

ROLLOUT = ("model", "candidate")
PHASES = ("waiting", "shadow", "canary", "paused", "rolled_back", "promoted", "aborted")


class RolloutMetrics:
    def __init__(self) -> None:
        self.comparisons = CounterFamily(
            "gateway_rollout_comparisons_total",
            "Shadow comparisons of the candidate's and the pool's answers, by result.",
            (*ROLLOUT, "result"),
        )
        self.disagreements = CounterFamily(
            "gateway_rollout_disagreements_total",
            "Compared answers whose output differed (beyond the vote's tolerance), by output.",
            (*ROLLOUT, "output"),
        )
        self.copies = CounterFamily(
            "gateway_rollout_copies_total",
            "Shadow copies not compared, by why: failed (no comparable answer) or shed.",
            (*ROLLOUT, "outcome"),
        )
        self.candidate = CounterFamily(
            "gateway_rollout_candidate_requests_total",
            "Requests the candidate took (canary: served; shadow: copies), by result.",
            (*ROLLOUT, "result"),
        )
        self.share = GaugeFamily(
            "gateway_rollout_share_percent",
            "Percent of the model's requests the candidate serves now.",
            ROLLOUT,
        )
        self.phase = GaugeFamily(
            "gateway_rollout_phase", "1 for the rollout's phase now.", (*ROLLOUT, "phase")
        )
        self.families = (self.comparisons, self.disagreements, self.copies, self.candidate,
                         self.share, self.phase)  # fmt: skip

    def update(self, doc: Mapping[str, Any]) -> None:
        """Sets every series from ``Rollouts.snapshot()``."""
        for model, rollout in doc.get("rollouts", {}).items():
            labels = (model, str(rollout["candidate"]))
            total = rollout["evidence"]["total"]
            compared, agreed = int(total["compared"]), int(total["agreed"])
            self.comparisons.labels(*labels, "agree").set(agreed)
            self.comparisons.labels(*labels, "disagree").set(compared - agreed)
            for output, count in total["disagreements"].items():
                self.disagreements.labels(*labels, str(output)).set(count)
            self.copies.labels(*labels, "failed").set(total["compare_errors"])
            self.copies.labels(*labels, "shed").set(total["shadow_shed"])
            requests, errors = int(total["candidate_requests"]), int(total["candidate_errors"])
            self.candidate.labels(*labels, "ok").set(requests - errors)
            self.candidate.labels(*labels, "error").set(errors)
            self.share.labels(*labels).set(float(rollout["share_percent"]))
            for phase in PHASES:
                self.phase.labels(*labels, phase).set(1.0 if rollout["phase"] == phase else 0.0)

"""What audits and golden probes found, carried out where the gateway decides.

An audit's verdict (`gateway.pipeline.audit`) becomes an event of the model's correctness SLOs
(good unless its answer was shown wrong; a failed audit judged nothing), a strike (or a clean
record) for every replica it judged, through the suspects' records that votes use
(`gateway.voting.quarantine`, ``by="audit"``: a replica found wrong too often is quarantined),
and a count by outcome (``gateway_audits_total``). A golden probe's result is an event of the
correctness SLOs of every model served by the probed pool. In one process the pipeline's
auditor reports here directly; a data-plane worker ships its verdicts to the control process
(`gateway.worker.shipped.ShippedAudits`), whose intake calls the same methods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.config.models import ModelConfig
from gateway.pipeline.audit import FAILED, VERDICTS, WRONG
from gateway.slo.engine import SloBook
from gateway.telemetry.metrics import Metrics
from gateway.voting.quarantine import DissentSink

FALLBACK_PREFIX = "fallback/"
SHED = ("load", "concurrency", "rate")


class AuditVerdicts:
    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        slo: SloBook,
        suspects: DissentSink,
        metrics: Metrics,
    ) -> None:
        self._models = models
        self._slo = slo
        self._suspects = suspects
        self._metrics = metrics
        # by model: outcome -> audits
        self.counts: dict[str, Counter[str]] = {}
        # pool -> the models with a correctness SLO it serves (golden probes' events)
        self._judged_by_pool: dict[str, list[str]] = {}
        for name, model in models.items():
            if any(slo.kind == "correctness" for slo in model.slos):
                for pool in model.pools:
                    self._judged_by_pool.setdefault(pool, []).append(name)

    def audited(self, model: str, verdict: str, judged: Sequence[Sequence[Any]]) -> None:
        """One audit's verdict, and each replica it judged: ``(replica, rows, rows wrong)``."""
        config = self._models.get(model)
        if config is None or config.audit is None:
            raise ValueError(f"model {model!r} has no audits")
        if verdict not in VERDICTS:
            raise ValueError(f"not an audit verdict: {verdict!r}")
        self._count(model, verdict)
        if verdict == FAILED:
            return
        self._slo.judge(model, verdict != WRONG, "audit")
        for replica_id, rows, wrong in judged:
            if not str(replica_id).startswith(FALLBACK_PREFIX):
                self._suspects.observe(
                    model, config.audit, str(replica_id), int(rows), int(wrong), "audit"
                )

    def shed(self, model: str, reason: str) -> None:
        """An audit drawn but not sent."""
        if model not in self._models or reason not in SHED:
            raise ValueError(f"not an audit of this gateway shed for a reason: {reason!r}")
        self._count(model, f"shed_{reason}")

    def golden(self, pool: str, passed: bool) -> None:
        """A golden probe's verdict on a replica of ``pool``."""
        for model in self._judged_by_pool.get(pool, ()):
            self._slo.judge(model, passed, "golden")

    def _count(self, model: str, outcome: str) -> None:
        counts = self.counts.get(model)
        if counts is None:
            counts = self.counts[model] = Counter()
        counts[outcome] += 1
        self._metrics.audit(model, outcome)

    def to_json(self) -> dict[str, Any]:
        """Audits by model and outcome since start (this instance), for ``/admin/state``."""
        return {model: dict(sorted(counts.items())) for model, counts in self.counts.items()}

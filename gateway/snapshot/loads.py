"""Load readings on the link: a replica's `LoadReport` and its time as a `LoadView`, and back.

A worker reads reports off its own answers; the others learn of them through the control
process, which takes each worker's newest (in its batch's gauges) and every scrape's onto its
replicas, and publishes each replica's freshest in the snapshot. So every worker weighs the
queues all workers' answers reported, a batch and a snapshot later (their own answers' at
once), and the control knows which replicas need no scrape.
"""

from __future__ import annotations

from gateway.policies.load_report import LoadReport
from gateway.snapshot.messages import LoadView


def load_view(report: LoadReport, at: float, *, accelerator: bool = True) -> LoadView:
    """``report`` taken at ``at``, for the link (its accelerator readings only if asked)."""
    readings = report.accelerator if accelerator else ()
    return LoadView(report.queue, report.inflight, at, report.source, readings)


def load_report(view: LoadView) -> LoadReport:
    return LoadReport(view.queue, view.inflight, view.accelerator, view.source)

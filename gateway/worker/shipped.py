"""A worker's stand-ins for what the control process owns: each call shipped, not carried out.

In one process the request path tells the metrics, the outlier detector, the vote's suspects,
the rollouts' evidence and the upstream events what happened, and they decide. In a data-plane
worker the same calls become `Call` records appended to the batch its `BatchShipper` sends
to the control process (one list append each), which carries them out on its own objects
(`gateway.control.intake`), so every decision sees every worker's traffic. What a worker's own
requests need at once stays local: its breakers, its replicas' outstanding counts and latency,
the pools' latency windows and fault records (`Reactions.ended` does those before `fleet`).

Outcomes travel as `gateway.snapshot.outcomes.outcome_args` (a tuple of plain values); a
judged success and a request's queue wait are tallied with those alike instead
(`BatchShipper.tally_success`, `BatchShipper.wait`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.outcome import Outcome, OutcomeKind
from gateway.pipeline.audit import Judged
from gateway.pipeline.reactions import Reactions
from gateway.rollout.controller import Rollouts
from gateway.rollout.progress import Progress
from gateway.snapshot.messages import Call, RolloutView
from gateway.snapshot.outcomes import outcome_args
from gateway.snapshot.shipper import BatchShipper
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica
from gateway.voting.suspects import SuspectRule

_SUCCESS = OutcomeKind.SUCCESS


class ShippedMetrics:
    """`gateway.telemetry.metrics.RequestMetrics`, shipped as ``metrics`` calls."""

    __slots__ = ("_shipper",)

    def __init__(self, shipper: BatchShipper) -> None:
        self._shipper = shipper

    def _ship(self, method: str, *args: Any) -> None:
        self._shipper.calls.append(Call("metrics", method, args))

    def queued(self, model: str, seconds: float) -> None:
        self._shipper.wait(model, seconds)

    def attempt(self, model: str, pool: str, outcome: Outcome) -> None:
        self._ship("attempt", model, pool, outcome_args(outcome))

    def retry(self, model: str) -> None:
        self._ship("retry", model)

    def retry_refused(self, model: str) -> None:
        self._ship("retry_refused", model)

    def hedge(self, model: str, won: bool) -> None:
        self._ship("hedge", model, won)

    def shed(self, model: str, reason: str = "in_flight_limit") -> None:
        self._ship("shed", model, reason)

    def per_try_timeout(self, model: str, pool: str, replica: str) -> None:
        self._ship("per_try_timeout", model, pool, replica)

    def vote(self, model: str, tally: str, dissenters: Iterable[str] = ()) -> None:
        self._ship("vote", model, tally, list(dissenters))

    def fallback(self, model: str, reason: str) -> None:
        self._ship("fallback", model, reason)


class ShippedReactions(Reactions):
    """`Reactions` whose fleet-wide part (outlier detector, attempt metrics) and charges are
    shipped as ``fleet`` calls; the rest is done here, for this worker's own requests."""

    __slots__ = ("_shipper",)

    def __init__(self, shipper: BatchShipper, metrics: ShippedMetrics) -> None:
        super().__init__(metrics)
        self._shipper = shipper

    def fleet(
        self, model: str, pool: Pool, replica: Replica, outcome: Outcome, judged: bool
    ) -> None:
        shipper = self._shipper
        if judged and outcome.kind is _SUCCESS:
            shipper.tally_success(model, pool.name, replica.id, outcome.latency_s)
            return
        if shipper.successes:
            shipper.settle(replica.id)
        args = (model, pool.name, replica.id, outcome_args(outcome), judged)
        shipper.calls.append(Call("fleet", "attempt", args))

    def charged(self, pool: Pool, replica: Replica, refuted: Outcome) -> None:
        replica.charge(refuted.describe())
        if replica.breaker is not None:
            replica.breaker.count(refuted)
        shipper = self._shipper
        if shipper.successes:
            shipper.settle(replica.id)
        args = (pool.name, replica.id, outcome_args(refuted))
        shipper.calls.append(Call("fleet", "charged", args))


class ShippedSuspects:
    """`gateway.voting.quarantine.DissentSink`: votes' dissents shipped as ``suspects`` calls
    (control keeps the records and quarantines)."""

    __slots__ = ("_shipper",)

    def __init__(self, shipper: BatchShipper) -> None:
        self._shipper = shipper

    def observe(
        self,
        model: str,
        config: SuspectRule,
        replica_id: str,
        rows: int,
        dissented: int,
        by: str = "vote",
    ) -> None:
        args = (model, replica_id, rows, dissented)
        self._shipper.calls.append(Call("suspects", "observe", args))

    def forget_replica(self, replica_id: str) -> None:
        """Nothing is kept here to forget."""

    def to_json(self) -> dict[str, dict[str, dict[str, float]]]:
        return {}


class ShippedAudits:
    """`gateway.pipeline.audit.AuditSink`: audits' verdicts shipped as ``audits`` calls (the
    control counts them, feeds the correctness SLOs and strikes the replicas found wrong)."""

    __slots__ = ("_shipper",)

    def __init__(self, shipper: BatchShipper) -> None:
        self._shipper = shipper

    def audited(self, model: str, verdict: str, judged: Judged) -> None:
        args = (model, verdict, [list(entry) for entry in judged])
        self._shipper.calls.append(Call("audits", "audited", args))

    def shed(self, model: str, reason: str) -> None:
        self._shipper.calls.append(Call("audits", "shed", (model, reason)))


class ShippedEvents:
    """`gateway.upstream.events.UpstreamEvents` of a worker's registry, shipped as ``events``
    calls: a breaker transition (control re-broadcasts it to every worker's breaker).
    ``muted`` while the worker forces a state the control sent (it is not this worker's)."""

    __slots__ = ("_shipper", "muted")

    def __init__(self, shipper: BatchShipper) -> None:
        self._shipper = shipper
        self.muted = False

    def breaker_transition(self, replica: str, old: str, new: str) -> None:
        if not self.muted:
            self._shipper.calls.append(Call("events", "breaker_transition", (replica, old, new)))

    def ejection(self, replica: str, reason: str) -> None:
        self._shipper.calls.append(Call("events", "ejection", (replica, reason)))

    def quarantine(self, replica: str, reason: str) -> None:
        self._shipper.calls.append(Call("events", "quarantine", (replica, reason)))


class WorkerRollouts(Rollouts):
    """A worker's rollouts: each request's plan drawn here from the progress the control
    process decided (`follow`, from its snapshots); the evidence shipped as ``rollouts``
    calls, never judged here."""

    def __init__(
        self, models: Mapping[str, ModelConfig], clock: Clock, rng: Any, shipper: BatchShipper
    ) -> None:
        super().__init__(
            models,
            clock,
            rng,
            decide=_never_decide,
            known=lambda key: None,
            audit=lambda event: None,
            burning=lambda model: False,
            synced=lambda: False,
            origin="worker",
        )
        self._shipper = shipper

    def follow(self, views: Mapping[str, RolloutView | None]) -> None:
        """The progress of each run as the control process last decided it."""
        for model, run in self.runs.items():
            view = views.get(model)
            if view is None:
                run.progress = None
            elif run.progress is None or (run.progress.phase, run.progress.step) != (
                view.phase,
                view.step,
            ):
                run.progress = Progress(view.phase, view.step, run.declared, 0.0)

    def served(self, model: str, candidate: bool, ok: bool, latency_s: float) -> None:
        args = (model, candidate, ok, latency_s)
        self._shipper.calls.append(Call("rollouts", "served", args))

    def compared(self, model: str, agreed: bool, differing: list[str], copy_s: float) -> None:
        args = (model, agreed, differing, copy_s)
        self._shipper.calls.append(Call("rollouts", "compared", args))

    def copy_failed(self, model: str) -> None:
        self._shipper.calls.append(Call("rollouts", "copy_failed", (model,)))

    def shed(self, model: str) -> None:
        self._shipper.calls.append(Call("rollouts", "shed", (model,)))

    def tick(self) -> None:
        """Nothing is decided here."""


def _never_decide(key: str, action: str, by: str, reason: str, *, floor: int) -> Any:
    raise RuntimeError("a worker decides no rollout: its control process does")

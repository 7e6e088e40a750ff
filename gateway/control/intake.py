"""The workers' batches taken into the control process's gateway: their outcomes, decided on.

A batch (`gateway.snapshot.messages.Batch`) carries what a worker's request path would have
told the control-owned objects in one process (`gateway.worker.shipped`): every answer, for
the answer tape (metrics, SLOs, Triton statistics, history: folded as if served here), and
`Call` records, carried out here through a table of what may be called, never by a name a
worker chose: the request path's metrics; each attempt's fleet-wide part (the replica's counts,
the outlier detector, the attempt's metrics; judged successes alike come as one record of
their latencies, carried out as each would have been) and each charge; votes' dissents (the
suspects' records and quarantines); audits' verdicts and sheds
(`gateway.control.audit_verdicts`); rollouts' evidence; a worker's breaker transitions
(`FleetView`).
A record that does not fit its entry (unknown, mistyped) is counted and dropped. Batches of
one worker arrive in order, and a gap in their numbers is batches its link dropped while this
process did not read (counted).

Each batch's gauges are the worker's levels; summed over the workers they are the gateway's
(`WorkerLevels`): in flight per model, the retry budget's balance, resource errors, load
reports taken and refused, the in-flight bytes, and each replica's outstanding attempts
(written onto the control's replicas). The load readings a worker's answers carried since
its previous batch become the control's replicas' where fresher (`gateway.snapshot.loads`):
the next snapshot takes them to the other workers, and the control's scraper leaves those
replicas alone.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from gateway.config.models import ModelConfig
from gateway.config.policies import VoteConfig
from gateway.control.runtime import Gateway
from gateway.control.view import FleetView
from gateway.memory.inflight_bytes import BudgetLevels
from gateway.outcome import REPLICA_FAILURES, Outcome, OutcomeKind
from gateway.pipeline.reactions import Reactions
from gateway.snapshot.loads import load_report
from gateway.snapshot.messages import Batch, Call, Gauges, LoadView
from gateway.snapshot.outcomes import outcome_of
from gateway.telemetry.throttle import LogThrottle
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)

Handler = Callable[..., None]
_METRICS = ("queued", "retry", "retry_refused", "hedge", "shed", "fallback")
_ROLLOUTS = ("served", "compared", "copy_failed", "shed")


class WorkerLevels:
    """The data plane's levels: each worker's last gauges, summed
    (`gateway.control.runtime.Levels`)."""

    def __init__(self) -> None:
        self.gauges: dict[int, Gauges] = {}

    def in_flight(self, model: str) -> int:
        return sum(g.in_flight.get(model, 0) for g in self.gauges.values())

    def retry_budget(self) -> float:
        return sum(g.budget_balance for g in self.gauges.values())

    def local_errors(self) -> Mapping[str, int]:
        total: Counter[str] = Counter()
        for gauges in self.gauges.values():
            total.update(gauges.local_errors)
        return total

    def shed(self, model: str) -> int:
        return sum(g.shed.get(model, 0) for g in self.gauges.values())

    def hedges(self) -> tuple[int, int]:
        sent = sum(g.hedges[0] for g in self.gauges.values())
        return sent, sum(g.hedges[1] for g in self.gauges.values())

    def load_reports(self) -> Counter[str]:
        """Load reports the workers' answers carried: taken, and refused by why."""
        total: Counter[str] = Counter()
        for gauges in self.gauges.values():
            total.update(gauges.load_reports)
        return total

    def tenants(self, model: str, config: ModelConfig) -> dict[str, dict[str, int]]:
        total: dict[str, Counter[str]] = {}
        for gauges in self.gauges.values():
            for tenant, counts in gauges.tenants.get(model, {}).items():
                total.setdefault(tenant, Counter()).update(counts)
        return {tenant: dict(counts) for tenant, counts in total.items()}

    def inflight_bytes(self) -> BudgetLevels:
        total = [0, 0, 0, 0, 0]
        for gauges in self.gauges.values():
            for i, value in enumerate(gauges.inflight_bytes):
                total[i] += value
        return BudgetLevels(*total)

    def outstanding(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for gauges in self.gauges.values():
            total.update(gauges.outstanding)
        return total


class BatchIntake:
    def __init__(self, gateway: Gateway, view: FleetView) -> None:
        self.levels = WorkerLevels()
        self._view = view
        # whose batch is being taken in
        self._worker = -1
        # records dropped, by target.method
        self.refused: Counter[str] = Counter()
        # batches the links dropped
        self.gaps = 0
        # answers served on a snapshot gone stale
        self.stale_answers = 0
        self._seq: dict[int, int] = {}
        # workers that shipped a batch since they connected
        self.serving: set[int] = set()
        # each worker's snapshot was stale at its last batch
        self.stale: dict[int, bool] = {}
        # the last `Flush` token each worker answered
        self.flushed: dict[int, int] = {}
        # a barrier waiting on them
        self.on_flushed: Callable[[], None] = lambda: None
        self._lines = LogThrottle(gateway.clock)
        self.bind(gateway)

    def bind(self, gateway: Gateway) -> None:
        """The gateway whose objects the records are carried out on (a reload's, from then)."""
        self._gateway = gateway
        gateway.levels = self.levels
        metrics = gateway.metrics
        self._reactions = Reactions(metrics)
        # each model's vote, built once
        self._votes: dict[str, VoteConfig] = {}
        handlers: dict[tuple[str, str], Handler] = {
            ("metrics", name): getattr(metrics, name) for name in _METRICS
        }
        handlers[("metrics", "vote")] = self._vote
        handlers[("metrics", "per_try_timeout")] = self._per_try_timeout
        handlers[("metrics", "attempt")] = self._metrics_attempt
        handlers[("fleet", "attempt")] = self._attempt
        handlers[("fleet", "charged")] = self._charged
        handlers[("fleet", "successes")] = self._successes
        handlers[("metrics", "queued_all")] = self._queued_all
        handlers[("suspects", "observe")] = self._dissent
        handlers[("audits", "audited")] = gateway.verdicts.audited
        handlers[("audits", "shed")] = gateway.verdicts.shed
        handlers[("events", "breaker_transition")] = self._breaker
        for name in _ROLLOUTS:
            handlers[("rollouts", name)] = self._rollout(name)
        self._handlers = handlers

    def forget(self, worker: int) -> None:
        """Worker ``worker`` is gone: its levels no longer count (its successor's will)."""
        self.levels.gauges.pop(worker, None)
        self._seq.pop(worker, None)
        self.serving.discard(worker)
        self.flushed.pop(worker, None)
        self._outstanding()

    def take(self, batch: Batch) -> None:
        """One worker's batch, carried out here."""
        last = self._seq.get(batch.worker)
        if last is not None and batch.seq > last + 1:
            self.gaps += batch.seq - last - 1
        self._seq[batch.worker] = batch.seq
        self.serving.add(batch.worker)
        gateway = self._gateway
        gateway.answers.answers.extend(batch.answers)
        self.stale[batch.worker] = batch.stale
        if batch.flushed > self.flushed.get(batch.worker, 0):
            self.flushed[batch.worker] = batch.flushed
            self.on_flushed()
        if batch.stale and batch.answers:
            self.stale_answers += len(batch.answers)
            gateway.metrics.stale_answers(len(batch.answers))
        self._worker = batch.worker
        for call in batch.calls:
            self._carry_out(call)
        if batch.gauges is not None:
            self._budget(batch.worker, batch.gauges)
            self.levels.gauges[batch.worker] = batch.gauges
            self._outstanding()
            if batch.gauges.loads:
                self._loads(batch.gauges.loads)
            self._permits()

    def _carry_out(self, call: Call) -> None:
        handler = self._handlers.get((call.target, call.method))
        if handler is None:
            self._refuse(call, "not a record this gateway carries out")
            return
        try:
            handler(*call.args)
        except (TypeError, ValueError, KeyError) as exc:
            self._refuse(call, f"{type(exc).__name__}: {exc}")

    def _refuse(self, call: Call, why: str) -> None:
        key = f"{call.target}.{call.method}"[:64]
        self.refused[key if key in self.refused or len(self.refused) < 64 else "other"] += 1
        held = self._lines.allow(key)
        if held is not None:
            log.warning("a worker's %s record was dropped: %s", key, why)

    def _loads(self, loads: Mapping[str, LoadView]) -> None:
        registry = self._gateway.registry
        sampler = self._gateway.accelerators
        for replica_id, view in loads.items():
            replica = registry.replica(replica_id)
            if replica is not None:
                replica.report_load(load_report(view), view.at)
                # judged now, not at its next read
                if view.accelerator and sampler is not None:
                    sampler.wake(replica_id)

    def _budget(self, worker: int, gauges: Gauges) -> None:
        """What the worker's retry budget counted since its last gauges, into the control's
        (which other gateways share through the store)."""
        before = self.levels.gauges.get(worker)
        last = before.budget if before is not None else (0, 0, 0)
        now = gauges.budget
        deltas = [max(0, n - b) for n, b in zip(now, last, strict=True)]
        if any(deltas):
            self._gateway.budget.absorb(*deltas)

    def _permits(self) -> None:
        granted: Counter[str] = Counter()
        peak: dict[str, int] = {}
        for gauges in self.levels.gauges.values():
            for replica_id, (given, most) in gauges.permits.items():
                granted[replica_id] += given
                peak[replica_id] = max(peak.get(replica_id, 0), most)
        for replica_id, given in granted.items():
            replica = self._gateway.registry.replica(replica_id)
            if replica is not None and replica.breaker is not None:
                replica.breaker.report_permits(given, peak[replica_id])

    def _outstanding(self) -> None:
        counts = self.levels.outstanding()
        for pool in self._gateway.registry.pools.values():
            # a draining one's finish too
            for replica in (*pool.replicas, *pool.draining):
                replica.report_outstanding(counts.get(replica.id, 0))

    # --- the records --------------------------------------------------------------------

    def _known(self, replica_id: str) -> bool:
        """Whether the replica is still the gateway's (a member or draining): one that left
        took its series with it, and a late record must not bring them back."""
        return any(
            replica.id == replica_id
            for pool in self._gateway.registry.pools.values()
            for replica in (*pool.replicas, *pool.draining)
        )

    def _per_try_timeout(self, model: str, pool: str, replica: str) -> None:
        if self._known(replica):
            self._gateway.metrics.per_try_timeout(model, pool, replica)

    def _vote(self, model: str, tally: str, dissenters: list[str]) -> None:
        known = [replica for replica in dissenters if self._known(replica)]
        self._gateway.metrics.vote(model, tally, known)

    def _metrics_attempt(self, model: str, pool: str, outcome: list[Any]) -> None:
        self._gateway.metrics.attempt(model, pool, outcome_of(outcome))

    def _attempt(
        self, model: str, pool_name: str, replica_id: str, args: list[Any], judged: bool
    ) -> None:
        """An attempt's fleet-wide part: as `Reactions.ended` would have counted it here."""
        gateway = self._gateway
        outcome = outcome_of(args)
        pool = gateway.registry.pools.get(pool_name)
        replica = _member(pool, replica_id)
        if pool is None or replica is None:
            # it left: its series went with it (`Departures`)
            return
        error = outcome.describe() if outcome.kind in REPLICA_FAILURES else None
        outstanding = replica.outstanding
        replica.started()
        replica.finished(
            outcome.latency_s, error, judged=bool(judged) and outcome.kind is not _CANCELLED
        )
        replica.report_outstanding(outstanding)
        self._reactions.fleet(model, pool, replica, outcome, bool(judged))

    def _successes(self, model: str, pool_name: str, replica_id: str, latencies: Any) -> None:
        """Judged successful attempts alike (`BatchShipper.tally_success`): as `_attempt`
        would have carried out each, in order."""
        latencies_s = _latencies(latencies)
        pool = self._gateway.registry.pools.get(pool_name)
        replica = _member(pool, replica_id)
        if pool is None or replica is None:
            return
        replica.succeeded(latencies_s)
        pool.outlier.observe(replica, Outcome(_SUCCESS, replica_id, latencies_s[-1]))
        self._gateway.metrics.successes(model, pool_name, replica_id, latencies_s)

    def _queued_all(self, model: str, seconds: Any) -> None:
        self._gateway.metrics.queued_all(model, _latencies(seconds))

    def _charged(self, pool_name: str, replica_id: str, args: list[Any]) -> None:
        gateway = self._gateway
        refuted = outcome_of(args)
        pool = gateway.registry.pools.get(pool_name)
        replica = _member(pool, replica_id)
        if pool is None or replica is None:
            return
        replica.charge(refuted.describe())
        pool.outlier.observe(replica, refuted)

    def _dissent(self, model: str, replica_id: str, rows: int, dissented: int) -> None:
        gateway = self._gateway
        config = self._votes.get(model)
        if config is None:
            # its own vote, or its burn policy's
            config = gateway.config.models[model].voted
            if config is None:
                raise ValueError(f"model {model!r} has no vote")
            self._votes[model] = config
        gateway.suspects.observe(model, config, replica_id, int(rows), int(dissented))

    def _breaker(self, replica_id: str, old: str, new: str) -> None:
        if new not in ("closed", "open", "half-open"):
            raise ValueError(f"not a breaker state: {new!r}")
        self._view.follow_worker(self._worker, replica_id, new)

    def _rollout(self, method: str) -> Handler:
        def carry_out(model: str, *args: Any) -> None:
            rollouts = self._gateway.rollouts
            if model in rollouts.runs:
                getattr(rollouts, method)(model, *args)

        return carry_out


_CANCELLED = OutcomeKind.CANCELLED
_SUCCESS = OutcomeKind.SUCCESS


def _latencies(values: Any) -> list[float]:
    """Seconds from a worker's record: a list of one or more finite floats (checked whole
    first, so a bad one leaves nothing half counted)."""
    if type(values) is not list or not values:
        raise TypeError("a list of seconds")
    for value in values:
        if type(value) is not float or not math.isfinite(value):
            raise ValueError(f"{value!r} is not a duration")
    return values


def _member(pool: Pool | None, replica_id: str) -> Replica | None:
    """The replica of ``pool`` named ``replica_id``, a draining one too (its attempts in
    flight finish on it)."""
    if pool is None:
        return None
    for replica in (*pool.replicas, *pool.draining):
        if replica.id == replica_id:
            return replica
    return None

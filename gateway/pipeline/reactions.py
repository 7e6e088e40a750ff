"""What an attempt's outcome feeds, in one place: the fault judge's intake on the request path.

Every attempt ends here once (`Reactions.ended`), however it ended: its request's ledger, its
replica's counts (outstanding, latency, failure streak), the replica's breaker (its half-open
permit given back, then judged), the pool's latency window and fault record, and what is
decided across the whole fleet (`fleet`): the outlier detector and the attempt's metrics. A
disputed answer (`gateway.faults.judge.disputed`) is judged later, by evidence; when the
fault judge charges it (`gateway.upstream.fault_actions.charge`), `charged` counts it as the
replica's failure.

One process does all of it. A data-plane worker (`gateway.worker.shipped`) does what its own
requests need at once and ships the `fleet` part to the control process, which replays it on
its registry, so ejections and metrics see every worker's attempts.
"""

from __future__ import annotations

from gateway.call import InferCall
from gateway.faults.judge import judged_now
from gateway.outcome import REPLICA_FAILURES, Outcome, OutcomeKind
from gateway.telemetry.metrics import RequestMetrics
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica

_SUCCESS = OutcomeKind.SUCCESS
_CANCELLED = OutcomeKind.CANCELLED


class Reactions:
    __slots__ = ("_metrics",)

    def __init__(self, metrics: RequestMetrics) -> None:
        self._metrics = metrics

    def ended(
        self,
        call: InferCall,
        pool: Pool,
        replica: Replica,
        breaker_state: str,
        outcome: Outcome,
    ) -> None:
        """An attempt of ``call`` on ``replica`` ended as ``outcome``."""
        call.ledger.record(outcome)
        # a disputed answer later, the gateway's own never
        judged = judged_now(outcome)
        error = outcome.describe() if outcome.kind in REPLICA_FAILURES else None
        # a cancelled try says nothing of its replica: not even a success clearing a streak
        replica.finished(outcome.latency_s, error, judged=judged and outcome.kind is not _CANCELLED)
        breaker = replica.breaker
        if breaker is not None:
            breaker.release(breaker_state)
            if judged:
                breaker.count(outcome)
        if outcome.kind is _SUCCESS:
            pool.latency.record(outcome.latency_s)
            pool.record.answered()
        self.fleet(call.model_name, pool, replica, outcome, judged)

    def fleet(
        self, model: str, pool: Pool, replica: Replica, outcome: Outcome, judged: bool
    ) -> None:
        """What the whole fleet decides from an attempt: outlier ejection, the metrics."""
        if judged:
            pool.outlier.observe(replica, outcome)
        self._metrics.attempt(model, pool.name, outcome)

    def charged(self, pool: Pool, replica: Replica, refuted: Outcome) -> None:
        """The fault judge charged ``replica`` with its refusal: one failure for its breaker
        and for the outlier detector."""
        replica.charge(refuted.describe())
        if replica.breaker is not None:
            replica.breaker.count(refuted)
        pool.outlier.observe(replica, refuted)

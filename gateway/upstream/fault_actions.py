"""Carrying out the fault judge's verdicts on a request's error answers.

The attempt layer records a disputed answer (`gateway.faults.judge.disputed`) as a `Dispute`
and charges nothing; the retry and vote layers hand their disputes here at each stage, the
judge (`gateway.faults.judge.judge`, with each pool's `FaultRecord`) gives the verdict, and
this module carries it out: a charged replica gets one failure for its breaker and outlier
detector (`REFUTED`); a request at fault gets the `RejectedByReplicas` (a 4xx naming the
replicas and their status, `Outcome.summary`: never their own text, which stays in the logs
and the keyed admin views) its caller raises; refusals left open go back to the caller.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.errors import RejectedByReplicas
from gateway.faults.judge import FaultVerdict, PoolFaultView, Stage, Witnesses, judge
from gateway.outcome import Outcome, OutcomeKind
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Dispute:
    """An error answer from one replica whose verdict waits for evidence."""

    replica: Replica
    pool: Pool
    outcome: Outcome
    # the replica's own error text
    message: str
    # what counts the refusal against the replica once charged (`Reactions.charged`)
    charged: Callable[[Outcome], None]
    # the digest of the request's inputs (`gateway.v2.input_digest`)
    input: str = ""

    @property
    def status(self) -> int:
        return self.outcome.status or 0

    @property
    def replica_id(self) -> str:
        return self.replica.id

    @property
    def pool_name(self) -> str:
        return self.pool.name


def answered(disputes: Sequence[Dispute], by: str) -> None:
    """Another replica (``by``) or a vote's quorum answered the request."""
    _carry_out(_judged(Stage.ANSWERED, disputes), "", by)


def refused(
    disputes: Sequence[Dispute], model: str, max_attempts: int
) -> RejectedByReplicas | None:
    """A try was refused and another may follow: the rejection to raise if the request is at
    fault (its disputes are then closed, nobody charged), else None (they stay open)."""
    return _carry_out(_judged(Stage.REFUSED, disputes, max_attempts), model)


def attempts_ended(
    disputes: Sequence[Dispute], model: str
) -> tuple[RejectedByReplicas | None, list[Dispute]]:
    """No try may follow and nobody answered: the rejection to raise (None: the caller's own
    error stands) and the refusals still open, which a vote may refute with other legs'
    answers."""
    verdict = _judged(Stage.ATTEMPTS_ENDED, disputes)
    return _carry_out(verdict, model), list(verdict.open)


def no_quorum(refusals: Sequence[Dispute], model: str) -> RejectedByReplicas | None:
    """A vote ended without a quorum: the rejection to raise if its legs' refusals blame the
    request, else None (no quorum)."""
    return _carry_out(_judged(Stage.NO_QUORUM, refusals), model)


def charge(dispute: Dispute, reason: str) -> None:
    """The replica was wrong to refuse: one failure for its breaker and outlier detector."""
    replica = dispute.replica
    # its words, escaped
    said = f"{reason}: {dispute.message}" if dispute.message else reason
    refuted = dataclasses.replace(dispute.outcome, kind=OutcomeKind.REFUTED, detail=said)
    dispute.charged(refuted)
    log.info("replica %s charged: %s", replica.id, refuted.describe())


def _judged(
    stage: Stage, disputes: Sequence[Dispute], max_attempts: int | None = None
) -> FaultVerdict[Dispute]:
    pools = {d.pool.name: d.pool for d in disputes}
    views: dict[str, PoolFaultView] = {
        name: pool.record.view(
            len(pool.replicas), {(d.input, d.status) for d in disputes if d.pool is pool}
        )
        for name, pool in pools.items()
    }
    return judge(stage, disputes, views, max_attempts)


def _carry_out(
    verdict: FaultVerdict[Dispute], model: str, by: str = ""
) -> RejectedByReplicas | None:
    for dispute, rule in verdict.charged:
        charge(dispute, rule.reason.format(status=dispute.status, by=by))
    if not verdict.request:
        return None
    ids = ", ".join(d.replica.id for d in verdict.request)
    last = verdict.request[-1]
    note = ""
    if verdict.rule is not None and verdict.rule.counted is Witnesses.REQUESTS_TO_ONE_INPUT:
        note = ", as on earlier requests with the same input"
    log.info("model %r: the request was refused by %s: %s", model, ids, last.outcome.describe())
    return RejectedByReplicas(
        f"model {model!r}: the request was refused by {ids} ({last.status}){note}: "
        f"{last.outcome.summary()}",
        last.status,
    )

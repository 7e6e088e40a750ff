"""Who is at fault for an error answer: decided by a second replica's answer, not by status.

A 4xx or a 500 from one replica says little on its own: the request may be wrong, or the
replica may be (a rollout with a changed signature that still reports ready answers 4xx to
everything; an input that crashes one runtime answers 500). So the attempt layer records such
an answer as a `Dispute` and charges nothing, and the retry layer asks another replica:

- another replica answers the request: every disputed replica is charged (`REFUTED`, a failure
  for its breaker and outlier detector), so a fast black hole cannot keep winning P2C;
- another replica gives the same status: the request is at fault: it is answered at once with
  a 4xx naming the replicas' message, no replica is charged and nothing more is tried. A 500
  needs more: a third witness where the pool and the attempts allow one (`witnesses`), since
  two replicas starting to fail at once (a bad node, a bad rollout wave) look exactly like a
  poison input to the first request that meets both (the chaos suite's burst of 500s on 2 of
  3 replicas turned 6 of 5,136 good requests into 400s with only two); and the pool must be
  working: fewer than `BROKEN_STREAK` error answers in a row across the pool since its last
  good one (one request's refusals stay below it). A pool that fails *everything* alike is
  broken (a bad driver, a bad rollout), not asked wrong: its failures count, so breakers open
  and the fallback answers. (The price: a client sending only poison to an otherwise idle pool
  can still get its replicas charged, and a poison input costs a third try.)
- no second opinion (one replica, no budget or time left): a 4xx goes to the client and no one
  is charged; a 500 is charged, as any 5xx is.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.errors import RejectedByReplicas
from gateway.outcome import Outcome, OutcomeKind
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica

log = logging.getLogger(__name__)
BROKEN_STREAK = 4  # error answers in a row across a pool that mean "broken", not "asked wrong"
SERVER_ERROR_WITNESSES = 3  # replicas that must give the same 5xx before the request is blamed


@dataclass(frozen=True, slots=True)
class Dispute:
    """An error answer from one replica whose verdict waits for evidence."""

    replica: Replica
    pool: Pool
    outcome: Outcome
    message: str  # the replica's own error text

    @property
    def status(self) -> int:
        return self.outcome.status or 0


def charge(dispute: Dispute, reason: str) -> None:
    """The replica was wrong to refuse: one failure for its breaker and outlier detector."""
    replica = dispute.replica
    refuted = dataclasses.replace(dispute.outcome, kind=OutcomeKind.REFUTED, detail=reason)
    replica.charge(refuted.describe())
    if replica.breaker is not None:
        replica.breaker.judge(refuted)
    dispute.pool.outlier.observe(replica, refuted)
    log.info("replica %s charged: %s", replica.id, refuted.describe())


def refuted(disputes: Sequence[Dispute], by: str) -> None:
    """Another replica (``by``) answered the request: charge every disputed replica."""
    for dispute in disputes:
        charge(dispute, f"answered {dispute.status} where {by} answered the request")


def witnesses(pool: Pool, max_attempts: int) -> int:
    """How many replicas must give one 5xx alike: three, or as many as the pool has and the
    attempts allow (never fewer than two: one replica's word is never enough)."""
    return max(2, min(SERVER_ERROR_WITNESSES, len(pool.replicas), max_attempts))


def request_at_fault(
    disputes: Sequence[Dispute], model: str, server_error_witnesses: int = 2
) -> RejectedByReplicas | None:
    """Replicas agreed on an error status: the request's fault (None: no such agreement).

    Two distinct replicas for a 4xx, ``server_error_witnesses`` for a 5xx (a vote's legs run
    different versions, so two of them agreeing is already strong evidence)."""
    alike: dict[int, list[Dispute]] = {}
    for dispute in disputes:
        if dispute.status >= 500 and not _working(dispute):
            continue
        same = alike.setdefault(dispute.status, [])
        if any(d.replica.id == dispute.replica.id for d in same):
            continue
        same.append(dispute)
        needed = server_error_witnesses if dispute.status >= 500 else 2
        if len(same) >= needed:
            return _rejected(model, same)
    return None


def _working(dispute: Dispute) -> bool:
    return dispute.pool.error_streak < BROKEN_STREAK


def unresolved(
    disputes: Sequence[Dispute], model: str
) -> tuple[RejectedByReplicas | None, list[Dispute]]:
    """No second opinion came: 5xx disputes are charged; a 4xx goes to the client.

    Returns the rejection to answer with (None: no 4xx) and the refusals still open, which a
    vote may yet refute with the other legs' answers.
    """
    refusals = [d for d in disputes if d.status < 500]
    for dispute in disputes:
        if dispute.status >= 500:
            charge(dispute, "no other replica could answer the request")
    return (_rejected(model, refusals[-1:]) if refusals else None), refusals


def _rejected(model: str, disputes: Sequence[Dispute]) -> RejectedByReplicas:
    ids = ", ".join(d.replica.id for d in disputes)
    last = disputes[-1]
    message = last.message or f"status {last.status}"
    return RejectedByReplicas(
        f"model {model!r}: the request was refused by {ids} ({last.status}): {message}",
        last.status,
    )

"""Who is at fault for an error answer: decided by a second replica's answer, not by status.

A 4xx or a 500 from one replica says little on its own: the request may be wrong, or the
replica may be (a rollout with a changed signature that still reports ready answers 4xx to
everything; an input that crashes one runtime answers 500). So the attempt layer records such
an answer as a `Dispute` and charges nothing, and the retry layer asks another replica:

- another replica answers the request: every disputed replica is charged (`REFUTED`, a failure
  for its breaker and outlier detector), so a fast black hole cannot keep winning P2C;
- another replica gives the same status: the request is at fault: it is answered at once with
  a 4xx naming the replicas' message, no replica is charged and nothing more is tried. For a
  500 the pool must also be working: fewer than `BROKEN_STREAK` error answers in a row across
  the pool since its last good one (one request's pair of refusals stays below it). A pool
  that fails *everything* alike is broken (a bad driver, a bad rollout), not asked wrong: its
  failures count, so breakers open and the fallback answers. (The price: a client sending only
  poison to an otherwise idle pool can still get its replicas charged.)
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


def request_at_fault(disputes: Sequence[Dispute], model: str) -> RejectedByReplicas | None:
    """Two replicas gave the same error status: the request's fault (None: no such pair)."""
    seen: dict[int, Dispute] = {}
    for dispute in disputes:
        if dispute.status >= 500 and not _working(dispute):
            continue
        first = seen.setdefault(dispute.status, dispute)
        if first.replica.id != dispute.replica.id:
            return _rejected(model, [first, dispute])
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

"""The fault judge: who is at fault for an error answer, the request or the replicas.

A 4xx or a 500 from one replica says little on its own: the request may be wrong (a poison
input that crashes every runtime), or the replica may be (a rollout with a changed signature
that still reports ready, two replicas starting to fail together on a bad node). So such an
answer is *disputed*: nobody is charged until evidence decides, and the evidence is other
answers to the same request (or, where a pool has one replica, to the same input). The rules
are the rows of `RULES`, in the order they are tried, and docs/faults.md's "Who is at fault"
table lists the same rows; `judge` reads them and nothing else decides. The retry and vote
layers and the golden prober only carry its verdicts out (`gateway.upstream.fault_actions`).

The gateway's own failures (`judged_now`: it ran short of file descriptors or memory) are
nobody's fault in these rows: no replica is charged, and the request is retried elsewhere.

`judge` is pure: what a pool has recently seen (its error streak, earlier refusals of an
input) comes in as a `PoolFaultView` the caller takes from the pool's `FaultRecord`, so a table of
cases tests every row without a pipeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from gateway.outcome import GATEWAYS_OWN, Outcome, OutcomeKind

# Answers that may be the request's fault as much as the replica's. Any other 5xx (502, 503,
# 504: overloaded or broken whatever it was asked), a connect error, a timeout or a broken
# reply is the replica's fault at once.
DISPUTED_SERVER_STATUSES = frozenset({500, 501})
# a 200 with null/NaN data for this request: the input overflowed
NONFINITE_STATUS = 400
# error answers in a row across a pool: broken, not asked wrong
BROKEN_STREAK = 4
# alike 500s (replicas; in a pool of one, requests) that blame it
SERVER_ERROR_WITNESSES = 3
# how long an input's earlier refusals count as evidence
SIGHTINGS_WINDOW_S = 600.0
# the pool size where separate requests with one input are the witnesses
SOLE = 1


class Stage(StrEnum):
    """When the evidence is judged."""

    # another replica answered the request (or a vote's quorum did)
    ANSWERED = "answered"
    # a try was refused and another may follow
    REFUSED = "refused"
    # no other attempt may follow and nobody answered
    ATTEMPTS_ENDED = "attempts ended"
    # a vote ended without a quorum
    NO_QUORUM = "no quorum"
    # a known-good input (a golden probe) was refused
    GOLDEN = "golden probe"


class Statuses(StrEnum):
    CLIENT = "4xx"
    SERVER = "500, 501"
    ANY = "any"

    def holds(self, status: int) -> bool:
        if self is Statuses.CLIENT:
            return 400 <= status < 500
        if self is Statuses.SERVER:
            return status in DISPUTED_SERVER_STATUSES
        return True


class Witnesses(StrEnum):
    """What counts as a second opinion for a row that blames the request."""

    REPLICAS = "distinct replicas"
    REPLICAS_THE_POOL_HAS = "distinct replicas, at most as many as the pool and attempts allow"
    REQUESTS_TO_ONE_INPUT = "separate requests with the same input to a pool of one"


class Fault(StrEnum):
    # answer the client a 4xx naming the witnesses; charge no one
    REQUEST = "request"
    # charge each refusing replica
    REPLICAS = "replicas"
    # no row decided: the refusals wait for more evidence
    UNDECIDED = "undecided"


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One row: at ``stages``, refusals with ``statuses`` lead to ``fault``.

    A row with ``witnesses`` above one needs that many refusals alike (the same status), counted
    as ``counted``, and with ``working`` only from pools still answering other requests; a row
    with one witness applies to each refusal alone. A row with ``keep_open`` leaves its
    refusals open after its verdict, for a vote's quorum to refute.
    """

    name: str
    stages: frozenset[Stage]
    statuses: Statuses
    fault: Fault
    witnesses: int = 1
    counted: Witnesses = Witnesses.REPLICAS
    working: bool = False
    keep_open: bool = False
    # why a charged replica is charged, for its last_error and the logs
    reason: str = ""

    @property
    def witnessed(self) -> bool:
        """Needs more than the refusal itself (tried before the one-witness rows)."""
        return self.witnesses > 1

    @property
    def needs_view(self) -> bool:
        return self.working or self.counted is not Witnesses.REPLICAS


def _at(*stages: Stage) -> frozenset[Stage]:
    return frozenset(stages)


RULES: tuple[FaultRule, ...] = (
    FaultRule("answered elsewhere", _at(Stage.ANSWERED), Statuses.ANY, Fault.REPLICAS,
              reason="answered {status} where {by} answered the request"),
    FaultRule("same 4xx from two replicas", _at(Stage.REFUSED, Stage.NO_QUORUM), Statuses.CLIENT,
              Fault.REQUEST, witnesses=2),
    FaultRule("same 5xx from three replicas", _at(Stage.REFUSED), Statuses.SERVER, Fault.REQUEST,
              witnesses=SERVER_ERROR_WITNESSES, counted=Witnesses.REPLICAS_THE_POOL_HAS,
              working=True),
    FaultRule("same 5xx from two replicas in a vote", _at(Stage.NO_QUORUM), Statuses.SERVER,
              Fault.REQUEST, witnesses=2, working=True),
    FaultRule("same 5xx to one input from a pool of one", _at(Stage.ATTEMPTS_ENDED),
              Statuses.SERVER, Fault.REQUEST, witnesses=SERVER_ERROR_WITNESSES,
              counted=Witnesses.REQUESTS_TO_ONE_INPUT, working=True, keep_open=True),
    FaultRule("no second opinion on a 5xx", _at(Stage.ATTEMPTS_ENDED), Statuses.SERVER,
              Fault.REPLICAS, reason="no other replica could answer the request"),
    FaultRule("no second opinion on a 4xx", _at(Stage.ATTEMPTS_ENDED), Statuses.CLIENT,
              Fault.REQUEST, keep_open=True),
    FaultRule("golden input refused", _at(Stage.GOLDEN), Statuses.ANY, Fault.REPLICAS,
              reason="refused a golden input ({status})"),
)  # fmt: skip


def disputed(outcome: Outcome) -> bool:
    """An error answer whose fault (request or replica) evidence must decide: a 4xx, 500, 501.
    Every other failure is the replica's at once."""
    status = outcome.status
    return status is not None and (
        outcome.kind is OutcomeKind.CLIENT_ERROR
        or (outcome.kind is OutcomeKind.SERVER_ERROR and status in DISPUTED_SERVER_STATUSES)
    )


def judged_now(outcome: Outcome) -> bool:
    """Whether an attempt's outcome is a verdict on its replica at once: not a disputed answer
    (evidence decides it later) nor the gateway's own failure (`GATEWAYS_OWN`: a connect or a
    read that failed for the gateway's lack of file descriptors or memory is no replica's
    fault, and no breaker, outlier detector or prober counts it)."""
    return outcome.kind not in GATEWAYS_OWN and not disputed(outcome)


def input_is_evidence(pool_size: int, status: int) -> bool:
    """Whether a disputed answer's input must be named (`gateway.v2.input_digest`) for the
    pool's record: only where a row counts separate requests with one input as witnesses."""
    return pool_size == SOLE and any(
        rule.counted is Witnesses.REQUESTS_TO_ONE_INPUT and rule.statuses.holds(status)
        for rule in RULES
    )


class FaultEvidence(Protocol):
    """One refusal: which replica of which pool answered what to which input."""

    @property
    def replica_id(self) -> str: ...

    @property
    def pool_name(self) -> str: ...

    @property
    def status(self) -> int: ...

    @property
    def input(self) -> str: ...


E = TypeVar("E", bound=FaultEvidence)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A plain `FaultEvidence` value (golden probes, tests)."""

    replica_id: str
    pool_name: str
    status: int
    input: str = ""


@dataclass(frozen=True, slots=True)
class PoolFaultView:
    """What a pool has recently seen, as the judge needs it (from its `FaultRecord`)."""

    # replicas in the pool
    size: int
    # error answers in a row across the pool since its last good one
    error_streak: int = 0
    now: float = 0.0
    refused_at: Mapping[tuple[str, int], Sequence[float]] = field(default_factory=dict)

    @property
    def working(self) -> bool:
        return self.error_streak < BROKEN_STREAK

    def sightings(self, input_: str, status: int) -> int:
        """Requests that got ``status`` for ``input_`` within the window (this one included)."""
        times = self.refused_at.get((input_, status), ())
        return sum(1 for t in times if self.now - t <= SIGHTINGS_WINDOW_S)


@dataclass(frozen=True, slots=True)
class FaultVerdict(Generic[E]):
    """What the evidence decides; `fault` sums it up, the parts say what to carry out."""

    # witnesses: the client gets a 4xx naming them
    request: tuple[E, ...] = ()
    # each refusal's replica is charged, by that row
    charged: tuple[tuple[E, FaultRule], ...] = ()
    # no verdict yet: kept for more evidence (a vote's quorum)
    open: tuple[E, ...] = ()
    # the row that blamed the request
    rule: FaultRule | None = None

    @property
    def fault(self) -> Fault:
        if self.request:
            return Fault.REQUEST
        return Fault.REPLICAS if self.charged else Fault.UNDECIDED


def judge(
    stage: Stage,
    refusals: Sequence[E],
    pools: Mapping[str, PoolFaultView] | None = None,
    max_attempts: int | None = None,
) -> FaultVerdict[E]:
    """The verdict on ``refusals`` (in the order they came) at ``stage``.

    Rows that need witnesses are tried first: of those that blame the request, the one whose
    witnesses were complete earliest in ``refusals`` wins, and nobody is charged. Otherwise
    each refusal goes to the first one-witness row at this stage that takes its status; those
    no row takes stay open. ``pools`` holds the view of each refusing replica's pool (needed by
    rows on working pools or pool sizes); ``max_attempts`` caps the witnesses one request can
    gather.
    """
    rows = [rule for rule in RULES if stage in rule.stages]
    views = pools or {}
    blamed: tuple[int, FaultRule, list[E]] | None = None
    for rule in rows:
        if rule.witnessed:
            found = _witnesses(rule, refusals, views, max_attempts)
            if found is not None and (blamed is None or found[0] < blamed[0]):
                blamed = (found[0], rule, found[1])
    if blamed is not None:
        _, rule, witnesses = blamed
        return FaultVerdict(tuple(witnesses), (), tuple(witnesses) if rule.keep_open else (), rule)
    charged: list[tuple[E, FaultRule]] = []
    still_open: list[E] = []
    answer: tuple[E, ...] = ()
    answered_by: FaultRule | None = None
    for refusal in refusals:
        row = next((r for r in rows if not r.witnessed and r.statuses.holds(refusal.status)), None)
        if row is None:
            still_open.append(refusal)
        elif row.fault is Fault.REPLICAS:
            charged.append((refusal, row))
        else:
            # the request's fault on this refusal alone: the last such answers the client
            answer, answered_by = (refusal,), row
            if row.keep_open:
                still_open.append(refusal)
    return FaultVerdict(answer, tuple(charged), tuple(still_open), answered_by)


def _witnesses(
    rule: FaultRule,
    refusals: Sequence[E],
    views: Mapping[str, PoolFaultView],
    max_attempts: int | None,
) -> tuple[int, list[E]] | None:
    """Where in ``refusals`` the row's witnesses were complete, and who they are (None: never)."""
    alike: dict[int, list[E]] = {}
    for index, refusal in enumerate(refusals):
        if not rule.statuses.holds(refusal.status):
            continue
        view = _view(views, refusal) if rule.needs_view else None
        if rule.working and view is not None and not view.working:
            # a broken pool's refusals say nothing about the request
            continue
        if rule.counted is Witnesses.REQUESTS_TO_ONE_INPUT:
            assert view is not None
            seen = view.sightings(refusal.input, refusal.status)
            if view.size == SOLE and seen >= rule.witnesses:
                return index, [refusal]
            continue
        same = alike.setdefault(refusal.status, [])
        if any(r.replica_id == refusal.replica_id for r in same):
            continue
        same.append(refusal)
        if len(same) >= _needed(rule, view, max_attempts):
            return index, same
    return None


def _view(views: Mapping[str, PoolFaultView], refusal: FaultEvidence) -> PoolFaultView:
    view = views.get(refusal.pool_name)
    if view is None:
        raise KeyError(f"no record of pool {refusal.pool_name!r} for the fault judge")
    return view


def _needed(rule: FaultRule, view: PoolFaultView | None, max_attempts: int | None) -> int:
    """Witnesses a row needs: as written, or for ``REPLICAS_THE_POOL_HAS`` as many as the pool
    has and the attempts allow (never fewer than two: one replica's word is never enough)."""
    if rule.counted is not Witnesses.REPLICAS_THE_POOL_HAS or view is None:
        return rule.witnesses
    cap = min(view.size, max_attempts if max_attempts is not None else view.size)
    return max(2, min(rule.witnesses, cap))

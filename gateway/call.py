"""The values that flow through the request path: an immutable request down, `InferAnswer` up.

- `InferCall`: the client's request as the edge accepted it (model, body, headers to forward,
  deadline, id, parsed header, span). No layer changes it; a vote derives its legs' request
  with ``dataclasses.replace`` (`speak`: the request in a pool's dialect).
- `Ledger`: what the request has cost so far: attempts on every pool and how each ended (its
  `Outcome`), for the answer's ``x-attempts``, the 504's message and tests. One per request,
  carried by the call; a vote's legs add to the same one.
- `Attempts`: one leg's record on one pool: how many attempts, the replicas tried, the error
  answers awaiting a verdict (`Dispute`), and the failure domains a vote's legs already took.
  A route opens it for each leg; below the route only the leg's own layers write it, through
  its methods.
- `Leg`: the request on one pool with its `Attempts`: what the retry, hedge and balance layers
  take.
- `Attempt`: one send of a leg's request: the leg, the replica the balancer chose and the
  breaker state it was admitted under: what the attempt layer takes.
- `InferAnswer`: what the gateway answers the client: a replica's reply passed on, or its own.

Layers return answers (or raise one error carrying its `Outcome`) instead of annotating a
shared object, so a layer's signature says what it reads. The module sits one layer below the
feature folders that hold layers (`gateway.voting`, `gateway.retry`) and below
`gateway.pipeline`, which composes them, so that every layer takes these values without
importing the pipeline.

`InferCall`, `Leg` and `Attempt` are built for every request and never written after: plain
slotted dataclasses, not frozen ones, whose construction stores each field through
``object.__setattr__`` (a call per field, on every request). None of them is hashable either
way (`InferCall` holds a dict).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from gateway.config.models import ModelConfig
from gateway.config.tenants import ANONYMOUS
from gateway.deadline import Deadline
from gateway.outcome import Outcome
from gateway.slo.policy import NORMAL, PolicyAdjustment
from gateway.telemetry.spans import RequestSpan
from gateway.upstream.fault_actions import Dispute
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica
from gateway.upstream.transport.base import AnswerRoom
from gateway.v2.body import Body
from gateway.v2.request import HEADER_LENGTH, InferRequestInfo


@dataclass(slots=True)
class Ledger:
    """What one request has cost: attempts on every pool, and each one's outcome."""

    attempts: int = 0
    # in the order they were known
    outcomes: list[Outcome] = field(default_factory=list)

    def record(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)


@dataclass(slots=True)
class InferCall:
    model_name: str
    model: ModelConfig
    # the buffers it arrived in, the id spliced in (`gateway.v2.body`)
    body: Body
    upstream_headers: Mapping[str, str]
    deadline: Deadline
    request_id: str
    # the parsed JSON header, when the edge parsed it
    request: InferRequestInfo | None = None
    # the request's trace span, when tracing is on
    span: RequestSpan | None = None
    # who asked: admission shares each model's bound among tenants
    tenant: str = ANONYMOUS
    # the id the client's answer carries (`request.id` is unique)
    client_id: str | None = None
    ledger: Ledger = field(default_factory=Ledger, compare=False)
    # where its replies' bodies are held before they are read (its request's share of
    # ``server.inflight_bytes``: `gateway.pipeline.edge.Arrival`); None: unbounded
    room: AnswerRoom | None = field(default=None, compare=False, repr=False)

    @property
    def attempts(self) -> int:
        """Attempts sent for this request so far, on every pool."""
        return self.ledger.attempts


@dataclass(slots=True, eq=False)
class Attempts:
    """One leg's attempts on one pool; written only by that leg's layers, through these
    methods."""

    ledger: Ledger
    pool: Pool
    # shared by a vote's legs, to land in distinct zones
    zones: set[str] | None = None
    count: int = 0
    tried: set[str] = field(default_factory=set)
    # error answers awaiting a verdict
    disputes: list[Dispute] = field(default_factory=list)

    def take(self, replica: Replica) -> None:
        """The balancer chose ``replica`` for the next attempt."""
        self.count += 1
        self.ledger.attempts += 1
        self.tried.add(replica.id)
        if self.zones is not None and replica.zone is not None:
            self.zones.add(replica.zone)

    def dispute(self, dispute: Dispute) -> None:
        self.disputes.append(dispute)

    def settle(self) -> list[Dispute]:
        """Takes the disputes still open (their verdict is being given now)."""
        disputes, self.disputes = self.disputes, []
        return disputes

    def again(self) -> Attempts:
        """Attempts for a tiebreak on the same pool: the replicas tried stay tried, the count
        goes on, and the disputes start afresh."""
        return Attempts(self.ledger, self.pool, self.zones, self.count, self.tried)


@dataclass(slots=True)
class Leg:
    call: InferCall
    attempts: Attempts

    @property
    def pool(self) -> Pool:
        return self.attempts.pool


def speak(call: InferCall, pool: Pool) -> InferCall:
    """The call as ``pool`` understands it (`gateway.v2.dialect`); the attempt layer turns the
    reply back into the client's names and form."""
    dialect = pool.dialect
    if dialect.native or call.request is None or dialect.speaks_as_is(call.request):
        return call
    header_length = call.upstream_headers.get(HEADER_LENGTH)
    encoded = dialect.request(call.body.joined(), header_length, call.request)
    return dataclasses.replace(call, body=Body.of(encoded.body), upstream_headers=encoded.headers())


@dataclass(slots=True)
class Attempt:
    leg: Leg
    replica: Replica
    # the state it was admitted under: a half-open permit is handed back
    breaker_state: str


@dataclass(slots=True)
class InferAnswer:
    status: int
    body: bytes
    content_type: str | None
    # Inference-Header-Content-Length of a binary reply
    header_length: str | None
    served_by: str
    attempts: int
    degraded: str | None = None
    # e.g. "3/3": legs agreeing / legs answered
    vote: str | None = None
    # the audit of this answer, started by the edge once its door has answered (sampled:
    # `gateway.pipeline.audit`); None for almost every answer
    audit: Callable[[], None] | None = None


Handler = Callable[[InferCall], Awaitable[InferAnswer]]
LegHandler = Callable[[Leg], Awaitable[InferAnswer]]
AttemptHandler = Callable[[Attempt], Awaitable[InferAnswer]]
# model name -> the burn policy's adjustment
Adjuster = Callable[[str], PolicyAdjustment]


def no_adjustment(model: str) -> PolicyAdjustment:
    return NORMAL

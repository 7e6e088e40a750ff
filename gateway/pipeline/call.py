"""The values that flow through the pipeline: `InferCall` down, `InferResult` up.

Layers annotate the call (chosen pool, replicas tried, attempt count) instead of passing a
growing list of arguments, so adding a layer never changes the others' signatures.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.config.models import ModelConfig
from gateway.deadline import Deadline
from gateway.policies.classify import Outcome
from gateway.slo.policy import NORMAL, PolicyAdjustment
from gateway.telemetry.spans import RequestSpan
from gateway.upstream.evidence import Dispute
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica
from gateway.v2.request import InferRequestInfo


@dataclass(slots=True)
class InferCall:
    model_name: str
    model: ModelConfig
    body: bytes
    upstream_headers: dict[str, str]
    deadline: Deadline
    request_id: str
    request: InferRequestInfo | None = None  # the parsed JSON header, when the edge parsed it
    span: RequestSpan | None = None  # the request's trace span, when tracing is on
    pool: Pool | None = None
    replica: Replica | None = None
    breaker_state: str = "closed"
    attempts: int = 0
    hedged: bool = False
    zones_taken: set[str] | None = None  # a vote's legs share it to land in distinct zones
    tried: set[str] = field(default_factory=set)
    outcomes: list[Outcome] = field(default_factory=list)
    disputes: list[Dispute] = field(default_factory=list)  # error answers awaiting a verdict


@dataclass(slots=True)
class InferResult:
    status: int
    body: bytes
    content_type: str | None
    header_length: str | None  # Inference-Header-Content-Length of a binary reply
    served_by: str
    attempts: int
    degraded: str | None = None
    vote: str | None = None  # e.g. "3/3": legs agreeing / legs answered


Handler = Callable[[InferCall], Awaitable[InferResult]]
Adjuster = Callable[[str], PolicyAdjustment]  # model name -> the burn policy's adjustment


def no_adjustment(model: str) -> PolicyAdjustment:
    return NORMAL

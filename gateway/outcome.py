"""What one upstream attempt came to: an `Outcome` of one `OutcomeKind`, classified once.

A leaf value: the error tree carries it (`gateway.errors.UpstreamError.outcome`) and every
reactor (retry policy, breaker, outlier detector, metrics, traces) reads it; the classifying
itself is `gateway.policies.classify`, and who is at fault for an error answer is the fault
judge's to say (`gateway.policies.fault`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    CLIENT_ERROR = "client_error"  # 4xx: whose fault, the fault judge decides
    SERVER_ERROR = "server_error"  # 5xx from the replica
    CONNECT_ERROR = "connect_error"
    TIMEOUT = "timeout"
    PROTOCOL_ERROR = "protocol_error"
    SLOW = "slow"  # gave up waiting early; the exchange goes on and is classified when it ends
    CANCELLED = "cancelled"  # a hedge or deadline cancelled it: no verdict on the replica
    REFUTED = "refuted"  # its error answer was charged to it by the fault judge


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: OutcomeKind
    replica: str
    latency_s: float
    status: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.SUCCESS

    @property
    def is_failure(self) -> bool:
        """Counts against the replica (breaker, outlier detection), at once or, for a disputed
        answer, once the fault judge charges it."""
        return self.kind in _REPLICA_FAILURES

    @property
    def retryable(self) -> bool:
        """Worth a try on another replica: a failure, or an error answer wanting a second
        opinion (a 4xx too: only another replica can tell a bad request from a bad replica)."""
        return self.kind in _RETRYABLE_KINDS

    def describe(self) -> str:
        if self.status is not None:
            return f"{self.replica} answered {self.status}" + (
                f": {self.detail}" if self.detail else ""
            )
        return f"{self.replica}: {self.kind.value}" + (f": {self.detail}" if self.detail else "")


_REPLICA_FAILURES = frozenset(
    {
        OutcomeKind.SERVER_ERROR,
        OutcomeKind.CONNECT_ERROR,
        OutcomeKind.TIMEOUT,
        OutcomeKind.PROTOCOL_ERROR,
        OutcomeKind.REFUTED,
    }
)
_RETRYABLE_KINDS = frozenset(
    {
        OutcomeKind.SERVER_ERROR,
        OutcomeKind.CLIENT_ERROR,
        OutcomeKind.CONNECT_ERROR,
        OutcomeKind.TIMEOUT,
        OutcomeKind.PROTOCOL_ERROR,
        OutcomeKind.SLOW,
    }
)

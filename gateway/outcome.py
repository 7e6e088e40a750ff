"""What one upstream attempt came to: an `Outcome` of one `OutcomeKind`, classified once.

A leaf value: the error tree carries it (`gateway.errors.UpstreamError.outcome`) and every
reactor (retry policy, breaker, outlier detector, metrics, traces) reads it; the classifying
itself is `gateway.policies.classify`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# Answers that may be the request's fault as much as the replica's: the verdict waits for a
# second replica's answer to the same request (see `gateway.upstream.evidence`). 502/503/504
# say the replica is overloaded or broken whatever it was asked, and count at once.
DISPUTED_SERVER_STATUSES = frozenset({500, 501})


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    CLIENT_ERROR = "client_error"  # 4xx: the request is wrong, never the replica's fault
    SERVER_ERROR = "server_error"  # 5xx from the replica
    CONNECT_ERROR = "connect_error"
    TIMEOUT = "timeout"
    PROTOCOL_ERROR = "protocol_error"
    SLOW = "slow"  # gave up waiting early; the exchange goes on and is classified when it ends
    CANCELLED = "cancelled"  # a hedge or deadline cancelled it: no verdict on the replica
    REFUTED = "refuted"  # its error answer was refuted: another replica answered that request


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
        """Counts against the replica (breaker, outlier detection)."""
        return self.kind in _REPLICA_FAILURES

    @property
    def disputed(self) -> bool:
        """An error answer whose fault (request or replica) a second replica must decide."""
        status = self.status
        return status is not None and (
            self.kind is OutcomeKind.CLIENT_ERROR
            or (self.kind is OutcomeKind.SERVER_ERROR and status in DISPUTED_SERVER_STATUSES)
        )

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

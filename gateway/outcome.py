"""What one upstream attempt came to: an `Outcome` of one `OutcomeKind`, classified once.

A leaf value: the error tree carries it (`gateway.errors.UpstreamError.outcome`) and every
reactor (retry policy, breaker, outlier detector, metrics, traces) reads it; the classifying
itself is `gateway.faults.classify`, and who is at fault for an error answer is the fault
judge's to say (`gateway.faults.judge`). Nothing writes one once it is built (a changed one
is a `dataclasses.replace`); it is a plain slotted dataclass all the same, not a frozen one,
because one is built for every attempt and a frozen one's construction stores each field
through ``object.__setattr__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class OutcomeKind(StrEnum):
    SUCCESS = "success"
    # 4xx: whose fault, the fault judge decides
    CLIENT_ERROR = "client_error"
    # 5xx from the replica
    SERVER_ERROR = "server_error"
    CONNECT_ERROR = "connect_error"
    TIMEOUT = "timeout"
    PROTOCOL_ERROR = "protocol_error"
    # gave up waiting early; the exchange goes on and is classified when it ends
    SLOW = "slow"
    # a hedge or deadline cancelled it: no verdict on the replica
    CANCELLED = "cancelled"
    # its error answer was charged to it by the fault judge
    REFUTED = "refuted"
    # the gateway's own shortage (fds, memory): no verdict
    LOCAL_RESOURCE = "local_resource"


@dataclass(slots=True)
class Outcome:
    kind: OutcomeKind
    replica: str
    latency_s: float
    status: int | None = None
    # what happened, in the replica's words where it gave any (escaped)
    detail: str = ""
    # the gateway's own finding in fixed words, which clients may read
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.SUCCESS

    @property
    def is_failure(self) -> bool:
        """Counts against the replica (breaker, outlier detection), at once or, for a disputed
        answer, once the fault judge charges it."""
        return self.kind in REPLICA_FAILURES

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

    def summary(self) -> str:
        """What a client is told of this attempt: the replica's id and a fixed phrase for its
        status or kind. Never the replica's own text (markup, a forged log line, an address):
        that stays in `detail`, for the logs and the keyed admin views (`describe`)."""
        if self.status is not None:
            said = self.note or status_phrase(self.status)
            return f"replica {self.replica} answered {self.status}: {said}"
        return f"replica {self.replica}: {_KIND_PHRASES[self.kind]}"


def status_phrase(status: int) -> str:
    """A fixed phrase for an HTTP status a replica answered (its class's where not listed)."""
    return _STATUS_PHRASES.get(status) or _CLASS_PHRASES.get(status // 100, "not an error")


# What clients are told of a replica's answer: a fixed phrase by status (by its class where
# not listed) or, without a status, by kind; rules as data, read by `Outcome.summary`.
_CLASS_PHRASES = {4: "client error", 5: "server error"}
_STATUS_PHRASES = {
    400: "bad request",
    401: "not authorized",
    403: "forbidden",
    404: "not found",
    408: "request timeout",
    409: "conflict",
    413: "payload too large",
    415: "unsupported media type",
    422: "unprocessable request",
    429: "too many requests",
    500: "internal error",
    501: "not implemented",
    502: "bad gateway",
    503: "unavailable",
    504: "gateway timeout",
}
_KIND_PHRASES = {
    OutcomeKind.SUCCESS: "answered",
    OutcomeKind.CLIENT_ERROR: "client error",
    OutcomeKind.SERVER_ERROR: "server error",
    OutcomeKind.CONNECT_ERROR: "could not connect",
    OutcomeKind.TIMEOUT: "no reply in time",
    OutcomeKind.PROTOCOL_ERROR: "invalid reply",
    OutcomeKind.SLOW: "no reply in time",
    OutcomeKind.CANCELLED: "cancelled",
    OutcomeKind.REFUTED: "refuted",
    OutcomeKind.LOCAL_RESOURCE: "the gateway is short of file descriptors or memory",
}

REPLICA_FAILURES = frozenset(
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
        # another replica may have a pooled connection
        OutcomeKind.LOCAL_RESOURCE,
    }
)
# What the gateway did to itself: no verdict on the replica, ever (`gateway.faults.judge`).
GATEWAYS_OWN = frozenset({OutcomeKind.LOCAL_RESOURCE})

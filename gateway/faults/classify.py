"""Classify every upstream attempt once into an `Outcome` that all reactors read.

The attempt layer calls `classify_status` / `classify_error` exactly once per attempt; the
retry policy, breakers, outlier detector, metrics and traces all consume the resulting value,
so they can never disagree about what happened (as in linkerd2-proxy's response classifier).
"""

from __future__ import annotations

from gateway.errors import (
    LocalResourceError,
    UpstreamConnectError,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.outcome import Outcome, OutcomeKind
from gateway.redact import printable


def classify_status(replica: str, status: int, latency_s: float, detail: str = "") -> Outcome:
    if status < 400:
        kind = OutcomeKind.SUCCESS
    elif status < 500:
        kind = OutcomeKind.CLIENT_ERROR
    else:
        kind = OutcomeKind.SERVER_ERROR
    return Outcome(kind, replica, latency_s, status, detail)


def classify_error(replica: str, error: UpstreamError, latency_s: float) -> Outcome:
    if isinstance(error, LocalResourceError):
        kind = OutcomeKind.LOCAL_RESOURCE
    elif isinstance(error, UpstreamTimeout):
        kind = OutcomeKind.TIMEOUT
    elif isinstance(error, UpstreamConnectError):
        kind = OutcomeKind.CONNECT_ERROR
    elif isinstance(error, UpstreamProtocolError):
        kind = OutcomeKind.PROTOCOL_ERROR
    else:
        kind = OutcomeKind.SERVER_ERROR
    return Outcome(kind, replica, latency_s, None, printable(error.message))

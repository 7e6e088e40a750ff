from __future__ import annotations

import pytest

from gateway.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from gateway.faults.classify import classify_error, classify_status
from gateway.outcome import OutcomeKind


@pytest.mark.parametrize(
    ("status", "kind", "retryable", "failure"),
    [
        (200, OutcomeKind.SUCCESS, False, False),
        (400, OutcomeKind.CLIENT_ERROR, True, False),  # retried for a second opinion
        (404, OutcomeKind.CLIENT_ERROR, True, False),
        (500, OutcomeKind.SERVER_ERROR, True, True),
        (503, OutcomeKind.SERVER_ERROR, True, True),
    ],
)
def test_status(status: int, kind: OutcomeKind, retryable: bool, failure: bool) -> None:
    outcome = classify_status("r", status, 0.01)
    assert (outcome.kind, outcome.retryable, outcome.is_failure) == (kind, retryable, failure)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (UpstreamTimeout("t"), OutcomeKind.TIMEOUT),
        (UpstreamConnectError("c"), OutcomeKind.CONNECT_ERROR),
        (UpstreamProtocolError("p"), OutcomeKind.PROTOCOL_ERROR),
    ],
)
def test_errors_are_retryable_failures(error: UpstreamTimeout, kind: OutcomeKind) -> None:
    outcome = classify_error("r", error, 0.01)
    assert outcome.kind is kind
    assert outcome.retryable and outcome.is_failure
    assert "r:" in outcome.describe()

"""A request's span and its attempts' spans form no cycle: they go when the request ends."""

from __future__ import annotations

import gc

from gateway.telemetry.spans import TracedRequest
from gateway.telemetry.tracecontext import new_trace_id


def test_an_attempt_keeps_its_requests_ids_not_the_request() -> None:
    request = TracedRequest(None, new_trace_id(), False, None, "vendor=1", None)
    attempt = request.attempt("r0", 1, "closed")
    assert not any(referent is request for referent in gc.get_referents(attempt))
    assert attempt.inject()["tracestate"] == "vendor=1"
    assert attempt.traceparent is not None and request.trace_id in attempt.traceparent

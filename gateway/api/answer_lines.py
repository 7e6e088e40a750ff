"""The header lines of an infer answer, for every door that writes HTTP/1.1 (REST, either
server): built from values the gateway made, or `checked` where a replica or a client gave them.
"""

from __future__ import annotations

from gateway.api.responses import checked
from gateway.call import InferAnswer
from gateway.pipeline.edge import Arrival
from gateway.v2.request import HEADER_LENGTH

_JSON_NAME = "application/json"
_JSON_TYPE = _JSON_NAME.encode()
_HEADER_LENGTH = HEADER_LENGTH.encode()
_ANSWER_HEAD = b"content-type: %s\r\nx-served-by: %s\r\nx-attempts: %d\r\nx-request-id: %s\r\n"


def answer_lines(arrival: Arrival, result: InferAnswer) -> bytes:
    """The answer's header lines, from values the gateway made or `checked`."""
    ctype = result.content_type
    content_type = _JSON_TYPE if ctype is None or ctype == _JSON_NAME else checked(ctype.encode())
    served, request_id = result.served_by.encode(), arrival.request_id.encode()
    lines = _ANSWER_HEAD % (content_type, served, result.attempts, request_id)
    if result.header_length is not None:
        # the replica's, or counted here: checked
        lines += b"%s: %s\r\n" % (_HEADER_LENGTH, checked(result.header_length.encode()))
    if result.degraded:
        lines += b"x-degraded: %s\r\n" % result.degraded.encode()
    if result.vote:
        lines += b"x-vote: %s\r\n" % result.vote.encode()
    if arrival.span.traceparent:
        lines += b"traceparent: %s\r\n" % arrival.span.traceparent.encode()
    return lines


def refusal_lines(arrival: Arrival) -> bytes:
    """A refused request's own header lines (its error's come with it: `error_answer`)."""
    lines = b"x-attempts: %d\r\nx-request-id: %s\r\n" % (
        arrival.attempts,
        arrival.request_id.encode(),
    )
    if arrival.span.traceparent:
        lines += b"traceparent: %s\r\n" % arrival.span.traceparent.encode()
    return lines

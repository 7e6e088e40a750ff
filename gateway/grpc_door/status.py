"""The gateway's one error tree as gRPC status codes: one table, beside the HTTP statuses.

Every `GatewayError` carries its HTTP status; the gRPC door answers the code of the same
meaning, with the error's message as the details and what REST sends as headers in trailing
metadata: ``retry-after`` (seconds, where the REST answer has ``Retry-After``),
``x-http-status`` (the REST status, so that a client can tell the two RESOURCE_EXHAUSTEDs
apart), and the request's ``x-request-id``, ``x-attempts`` and ``traceparent``.

    HTTP  error                              gRPC                 what gRPC clients do
    400   BadRequest (names the field)       INVALID_ARGUMENT     fail; never retried
    401   Unauthorized                       UNAUTHENTICATED      fail
    403   (a replica's refusal)              PERMISSION_DENIED    fail
    404   NotFound (model or version)        NOT_FOUND            fail
    408   RequestTimeout (REST only)         DEADLINE_EXCEEDED    fail
    409   Conflict                           FAILED_PRECONDITION  fail
    413   PayloadTooLarge                    RESOURCE_EXHAUSTED   fail (no retry-after)
    429   TooManyRequests (tenant's limit)   RESOURCE_EXHAUSTED   retry after retry-after
    500   an unexpected gateway error        INTERNAL             fail
    501   (a replica's)                      UNIMPLEMENTED        fail
    502   UpstreamError (never leaves)       UNAVAILABLE          may retry
    503   ServiceUnavailable: shed, no       UNAVAILABLE          may retry, on their own if a
          replica, no quorum, all failed                          retry policy says so
    504   DeadlineExceeded                   DEADLINE_EXCEEDED    fail (the deadline is spent)

Any other 4xx (a replica's refusal with its own status) is INVALID_ARGUMENT, any other 5xx
INTERNAL. A message over ``server.max_body_bytes`` is refused by gRPC itself before the door
sees it: RESOURCE_EXHAUSTED "Received message larger than max", with no ``x-http-status``;
so is metadata over ``server.max_header_bytes`` ("metadata size exceeds"). Before a message is
read (`gateway.grpc_door.receive`): one that does not fit in ``server.inflight_bytes`` in
time is RESOURCE_EXHAUSTED with ``x-http-status: 503`` and ``retry-after`` (memory, not the
tenant's limit), one not complete within ``server.body_timeout_s`` DEADLINE_EXCEEDED with
``x-http-status: 408``, and a call that ends without a complete message INTERNAL ("missing
request").
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import grpc

from gateway.errors import GatewayError

Code = grpc.StatusCode
CODES: Mapping[int, Code] = MappingProxyType(
    {
        400: Code.INVALID_ARGUMENT,
        401: Code.UNAUTHENTICATED,
        403: Code.PERMISSION_DENIED,
        404: Code.NOT_FOUND,
        408: Code.DEADLINE_EXCEEDED,
        409: Code.FAILED_PRECONDITION,
        413: Code.RESOURCE_EXHAUSTED,
        429: Code.RESOURCE_EXHAUSTED,
        500: Code.INTERNAL,
        501: Code.UNIMPLEMENTED,
        502: Code.UNAVAILABLE,
        503: Code.UNAVAILABLE,
        504: Code.DEADLINE_EXCEEDED,
    }
)
HTTP_STATUS = "x-http-status"

Metadata = tuple[tuple[str, str], ...]


def code_of(status: int) -> Code:
    """The gRPC code meaning what the HTTP ``status`` means."""
    code = CODES.get(status)
    if code is not None:
        return code
    return Code.INVALID_ARGUMENT if 400 <= status < 500 else Code.INTERNAL


def error_metadata(error: GatewayError) -> Metadata:
    """What the REST answer sends as headers, as trailing metadata (lower-case keys)."""
    return ((HTTP_STATUS, str(error.status)), *error.headers().items())

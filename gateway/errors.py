"""The gateway's one error tree; every error a client can see is a `GatewayError`.

Foreign exceptions (httptools, onnxruntime, redis, the socket layer) are translated into this tree
exactly where they enter, chained with ``raise ... from exc``. Each class carries its HTTP status,
so the edge renders every failure the same way: ``{"error": "..."}`` with a precise status.

    GatewayError                      (500, never raised directly)
    ├── ClientError                   4xx: the request itself is wrong
    │   ├── BadRequest                400: names the bad field
    │   ├── Unauthorized              401: a missing or unknown API key, with WWW-Authenticate
    │   ├── NotFound                  404: unknown model or version
    │   ├── RequestTimeout            408: the client did not send its whole request in time
    │   ├── Conflict                  409: the request conflicts with how the gateway runs
    │   ├── PayloadTooLarge           413
    │   ├── TooManyRequests           429: the tenant's own limit reached, with Retry-After
    │   └── RejectedByReplicas        4xx: replicas refused the request (their status, message)
    ├── ServiceUnavailable            503: no way to serve right now, with Retry-After
    │   ├── Overloaded                503: admission bound reached
    │   ├── NoReplicaAvailable        503: no admissible replica in the pool
    │   ├── NoQuorum                  503: a vote's legs did not agree (or too few answered)
    │   ├── UpstreamFailed            503: every permitted attempt failed
    │   └── FallbackUnavailable       503: the fallback model is not verified (reason says why)
    ├── DeadlineExceeded              504: the request's deadline passed
    └── UpstreamError                 one failed attempt; internal, retried or wrapped
        ├── UpstreamConnectError      could not connect / connection reset before a reply
        ├── LocalResourceError        the gateway itself ran short (fds, buffers, memory)
        ├── UpstreamTimeout           no reply within the per-try timeout
        ├── UpstreamProtocolError     the reply was not valid HTTP/1.1, or not a valid V2 reply
        └── UpstreamStatusError       the replica answered 4xx or 5xx

A request whose client left before its answer gets no answer at all: it is recorded with
`CLIENT_CLOSED` (499, nginx's "client closed request"), a failure the client caused, outside
the SLOs (`gateway.cancel`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

    from gateway.outcome import Outcome


# recorded, never sent: the client left before its answer
CLIENT_CLOSED = 499


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    status: int = 500
    retry_after_s: float | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[str, str]:
        """Extra response headers this error carries (for example ``Retry-After``)."""
        if self.retry_after_s is None:
            return {}
        return {"retry-after": str(max(1, round(self.retry_after_s)))}


class ClientError(GatewayError):
    """The request is wrong; retrying it unchanged cannot help."""

    status = 400


class BadRequest(ClientError):
    status = 400


class Unauthorized(ClientError):
    """No API key where the model requires one, or a key no tenant holds."""

    status = 401

    def headers(self) -> dict[str, str]:
        return {"www-authenticate": 'Bearer realm="gateway"'}


class NotFound(ClientError):
    status = 404


class RequestTimeout(ClientError):
    status = 408


class Conflict(ClientError):
    status = 409


class PayloadTooLarge(ClientError):
    status = 413


class TooManyRequests(ClientError):
    """A tenant's concurrency or rate limit: the client's own share, not the service's state
    (that is `Overloaded`); ``retry_after_s`` is when its next request may pass."""

    status = 429

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RejectedByReplicas(ClientError):
    """Replicas refused the request itself, as the fault judge decided (`gateway.faults.judge`);
    answered with a 4xx naming them and their message (a 500 becomes a 400)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status if 400 <= status < 500 else 400


class ServiceUnavailable(GatewayError):
    status = 503

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Overloaded(ServiceUnavailable):
    """Admission bound reached; shed at once rather than queue."""


class NoReplicaAvailable(ServiceUnavailable):
    """No replica of the pool is admissible (down, ejected, breaker open or unreachable)."""


class NoQuorum(ServiceUnavailable):
    """Too few vote legs answered, or they disagreed; the message says which."""


class UpstreamFailed(ServiceUnavailable):
    """Every attempt the policy allowed failed; the message says how the last one failed."""


class FallbackUnavailable(ServiceUnavailable):
    """The in-process fallback model cannot answer: not verified, refused, or it failed."""


class DeadlineExceeded(GatewayError):
    status = 504


class UpstreamError(GatewayError):
    """One attempt against one replica failed.

    A transport raises it bare; the attempt layer raises it again classified, as a new error
    built with its `Outcome` (and, for a slow try, the exchange that may still answer),
    chained to the transport's. Nothing is attached after construction.
    """

    status = 502

    def __init__(
        self,
        message: str,
        *,
        outcome: Outcome | None = None,
        pending: asyncio.Future[Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.outcome = outcome
        # a slow exchange that may still answer
        self.pending = pending

    def classified(self, outcome: Outcome) -> UpstreamError:
        """The same failure, as a new error of the same kind carrying its outcome."""
        return type(self)(self.message, outcome=outcome)


class UpstreamConnectError(UpstreamError):
    pass


class LocalResourceError(UpstreamError):
    """The gateway ran short of its own resources (file descriptors, socket buffers, memory)
    connecting to a replica or reading from it: no replica's fault, charged to none."""

    status = 503


class UpstreamTimeout(UpstreamError):
    status = 504


class UpstreamProtocolError(UpstreamError):
    pass


class UpstreamStatusError(UpstreamError):
    """The replica answered an error status; ``upstream_status`` and ``body`` say what."""

    def __init__(
        self,
        message: str,
        upstream_status: int,
        body: bytes = b"",
        *,
        outcome: Outcome | None = None,
    ) -> None:
        super().__init__(message, outcome=outcome)
        self.upstream_status = upstream_status
        self.body = body

    def classified(self, outcome: Outcome) -> UpstreamError:
        return UpstreamStatusError(self.message, self.upstream_status, self.body, outcome=outcome)

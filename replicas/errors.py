"""The replica's one error tree; every failure a client can see is a `ReplicaError`.

Each class carries its HTTP status, so the server renders every failure the same way:
``{"error": "..."}`` with a precise status and never a bare 500. A malformed request (the V2
codec's `v2proto.errors.ProtocolError`) becomes `BadRequest` where the server parses it; the
model wrapper raises `InferenceFailed`, the fault injector its injected failures.

    ReplicaError                 500 (never raised directly)
    ├── BadRequest               400: the message names the bad field
    ├── Unauthorized             401: no or wrong fault key (with WWW-Authenticate: Bearer)
    ├── NotFound                 404: unknown model, version or path
    ├── MethodNotAllowed         405
    ├── PayloadTooLarge          413
    ├── UnsupportedMediaType     415: a fault update that is not application/json
    ├── NotReady                 503: model not loaded/warmed, shutting down, or fault
    ├── InferenceFailed          500: onnxruntime raised; the message says how
    └── InjectedFault            500: the `error_rate` fault fired
"""

from __future__ import annotations

from collections.abc import Mapping


class ReplicaError(Exception):
    """Base of every error the replica raises on purpose."""

    status: int = 500
    headers: Mapping[str, str] | None = None  # extra response headers

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ReplicaError):
    status = 400


class Unauthorized(ReplicaError):
    status = 401
    headers = {"WWW-Authenticate": 'Bearer realm="replica faults"'}


class NotFound(ReplicaError):
    status = 404


class MethodNotAllowed(ReplicaError):
    status = 405


class PayloadTooLarge(ReplicaError):
    status = 413


class UnsupportedMediaType(ReplicaError):
    status = 415


class NotReady(ReplicaError):
    status = 503


class InferenceFailed(ReplicaError):
    status = 500


class InjectedFault(ReplicaError):
    status = 500

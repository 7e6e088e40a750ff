"""The error tree to gRPC codes (`gateway.grpc_door.status`): every class of the tree, by meaning,
and what its trailing metadata tells a client (which RESOURCE_EXHAUSTED, when to retry)."""

from __future__ import annotations

import grpc
import pytest

from gateway import errors
from gateway.grpc_door.status import code_of, error_metadata

Code = grpc.StatusCode


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (errors.BadRequest("inputs[0].name: missing"), Code.INVALID_ARGUMENT),
        (errors.Unauthorized("unknown API key"), Code.UNAUTHENTICATED),
        (errors.NotFound("no model 'x'"), Code.NOT_FOUND),
        (errors.RequestTimeout("body not complete"), Code.DEADLINE_EXCEEDED),
        (errors.Conflict("draining"), Code.FAILED_PRECONDITION),
        (errors.PayloadTooLarge("request body over 10 bytes"), Code.RESOURCE_EXHAUSTED),
        (errors.TooManyRequests("tenant acme over its rate", 3.0), Code.RESOURCE_EXHAUSTED),
        (errors.RejectedByReplicas("replicas refused it", 422), Code.INVALID_ARGUMENT),
        (errors.RejectedByReplicas("replicas refused it", 403), Code.PERMISSION_DENIED),
        (errors.RejectedByReplicas("replicas refused it", 404), Code.NOT_FOUND),
        (errors.RejectedByReplicas("replicas refused it", 500), Code.INVALID_ARGUMENT),
        (errors.Overloaded("model full"), Code.UNAVAILABLE),
        (errors.NoReplicaAvailable("none"), Code.UNAVAILABLE),
        (errors.NoQuorum("legs disagree"), Code.UNAVAILABLE),
        (errors.UpstreamFailed("all failed"), Code.UNAVAILABLE),
        (errors.FallbackUnavailable("not verified"), Code.UNAVAILABLE),
        (errors.DeadlineExceeded("deadline"), Code.DEADLINE_EXCEEDED),
        (errors.UpstreamTimeout("slow"), Code.DEADLINE_EXCEEDED),
        (errors.UpstreamConnectError("refused"), Code.UNAVAILABLE),
        (errors.GatewayError("a bug"), Code.INTERNAL),
    ],
)
def test_each_error_has_the_code_of_its_meaning(error: errors.GatewayError, code: Code) -> None:
    assert code_of(error.status) == code


def test_other_statuses_fall_to_the_class_of_their_hundred() -> None:
    assert code_of(418) == Code.INVALID_ARGUMENT
    assert code_of(507) == Code.INTERNAL


def test_trailing_metadata_tells_the_two_resource_exhausted_apart() -> None:
    limited = dict(error_metadata(errors.TooManyRequests("over its rate", 2.4)))
    assert limited == {"x-http-status": "429", "retry-after": "2"}
    too_large = dict(error_metadata(errors.PayloadTooLarge("request body over 10 bytes")))
    assert too_large == {"x-http-status": "413"}


def test_unavailable_and_unauthenticated_carry_what_rest_sends() -> None:
    shed = dict(error_metadata(errors.Overloaded("model full", retry_after_s=1.0)))
    assert shed["retry-after"] == "1" and shed["x-http-status"] == "503"
    unauthorized = dict(error_metadata(errors.Unauthorized("unknown API key")))
    assert unauthorized["www-authenticate"].startswith("Bearer")

"""Builds the gateway's own V2 answer (for votes and fallbacks) the way the client asked.

Outputs the client named, in the form it named (binary or JSON), or all of them in its
default form, read as a replica reads them (`v2proto.outputs`); the client's model name,
version and request id.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from gateway.errors import BadRequest
from gateway.v2.codec import EncodedBody, encode_outputs
from gateway.v2.request import InferRequestInfo
from v2proto.errors import ProtocolError
from v2proto.outputs import binary_by_default, outputs_to_send, requested_outputs


class _Versioned(Protocol):
    @property
    def version(self) -> str: ...


class AnsweredCall(Protocol):
    """What an answer needs from the call it answers (the pipeline's `InferCall`).

    A protocol rather than the pipeline's class, so this module stays below the pipeline.
    """

    @property
    def model_name(self) -> str: ...
    @property
    def model(self) -> _Versioned: ...
    @property
    def request(self) -> InferRequestInfo | None: ...


def encode_answer(
    call: AnsweredCall, outputs: Mapping[str, Any], parameters: Mapping[str, Any] | None = None
) -> EncodedBody:
    """``parameters``: the answer's own V2 parameters, e.g. how the gateway answered
    (``{"degraded": "no_quorum"}``, ``{"vote": "2/3"}``), for SDK users who see no headers."""
    header = call.request.header if call.request is not None else {}
    try:
        chosen = outputs_to_send(requested_outputs(header), binary_by_default(header), outputs)
    except ProtocolError as exc:
        raise BadRequest(exc.message) from exc
    missing = [o.name for o in chosen if o.name not in outputs]
    if missing:
        raise BadRequest(
            f"unknown output {missing[0]!r}; the model's outputs: {', '.join(outputs)}"
        )
    return encode_outputs(
        call.model_name,
        call.model.version,
        [(o.name, outputs[o.name], o.binary) for o in chosen],
        call.request.id if call.request is not None else None,
        parameters,
    )

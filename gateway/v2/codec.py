"""The gateway's door to the V2 codec it shares with the replicas (`v2proto.codec`).

The codec raises the protocol package's `ProtocolError`; this module is where it becomes the
gateway's own `BadRequest`, so nothing from that tree escapes as a bare 500.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from gateway.errors import BadRequest
from v2proto.codec import (
    EncodedBody,
    decode_infer_response,
    encode_infer_response,
    parse_infer_request,
)
from v2proto.errors import ProtocolError

__all__ = ["EncodedBody", "decode_inputs", "decode_outputs", "encode_outputs"]


def decode_inputs(body: bytes, header_length: str | None) -> dict[str, Any]:
    """The request's input tensors as numpy arrays (shapes and datatypes as declared)."""
    try:
        return dict(parse_infer_request(body, header_length).inputs)
    except ProtocolError as exc:
        raise BadRequest(str(exc)) from exc


def decode_outputs(
    body: bytes, header_length: str | None, only: Collection[str] | None = None
) -> dict[str, Any]:
    """A replica reply's output tensors (only those named in ``only``, if given); an
    undecodable reply raises `BadRequest`."""
    try:
        return dict(decode_infer_response(body, header_length, only).outputs)
    except ProtocolError as exc:
        raise BadRequest(f"undecodable replica reply: {exc}") from exc


def encode_outputs(
    model_name: str,
    version: str | None,
    outputs: Iterable[tuple[str, Any, bool]],
    request_id: str | None,
    parameters: Mapping[str, Any] | None = None,
) -> EncodedBody:
    return encode_infer_response(
        model_name, version, outputs, request_id=request_id, parameters=parameters
    )

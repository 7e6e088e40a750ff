"""Parse, validate and encode V2 inference bodies, in JSON and with the binary tensor extension.

One codec serves every side of the protocol: the replica parses requests and encodes responses,
the gateway decodes replicas' responses to vote on them, decodes a request's inputs for its
fallback model and encodes its own replies, tests and clients encode requests. Every malformed
body raises `ProtocolError` with a message that names the field; each caller maps it to its own
error (a 400 for a request, an upstream error for a reply).

Binary tensor data extension (Triton): the body is the JSON header followed by raw little-endian
tensors in tensor order; ``Inference-Header-Content-Length`` gives the JSON length; a binary
tensor has ``parameters.binary_data_size`` instead of ``data``. BYTES elements are a 4-byte
little-endian length followed by the bytes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from v2proto.errors import ProtocolError
from v2proto.fields import flag, name_of, parameters
from v2proto.outputs import RequestedOutput, outputs_to_send, requested_outputs
from v2proto.signature import Array, Signature
from v2proto.tensors import BinaryReader, decode_tensor, encode_tensor

HEADER_LENGTH = "inference-header-content-length"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"


@dataclass(frozen=True, slots=True)
class InferRequest:
    """A validated request: inputs as numpy arrays shaped as the request said."""

    id: str | None
    inputs: dict[str, Array]
    outputs: tuple[RequestedOutput, ...] | None  # None: the client asked for all outputs
    binary_output: bool  # request-level ``binary_data_output``: default for every output
    parameters: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        """Batch size: the first dimension of the first input (1 for a scalar input)."""
        first = next(iter(self.inputs.values()))
        return int(first.shape[0]) if first.ndim else 1

    def requested(self, available: Sequence[str]) -> tuple[RequestedOutput, ...]:
        """The outputs to return: the requested ones, or all of ``available``."""
        return outputs_to_send(self.outputs, self.binary_output, available)


@dataclass(frozen=True, slots=True)
class InferResponse:
    model_name: str
    model_version: str | None
    id: str | None
    outputs: dict[str, Array]
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A body ready to send; ``json_length`` is set only when binary tensors follow the JSON."""

    body: bytes
    json_length: int | None = None

    @property
    def content_type(self) -> str:
        return JSON_CONTENT_TYPE if self.json_length is None else BINARY_CONTENT_TYPE

    def headers(self) -> dict[str, str]:
        headers = {"content-type": self.content_type}
        if self.json_length is not None:
            headers[HEADER_LENGTH] = str(self.json_length)
        return headers


# ---------------------------------------------------------------------------------- decoding


def parse_infer_request(
    body: bytes, header_length: str | int | None = None, signature: Signature | None = None
) -> InferRequest:
    """Parse and validate an infer request; with a ``signature``, check it against the model."""
    doc, binary = _load(body, header_length)
    request_id = doc.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(f"'id' must be a string, got {request_id!r}")
    params = parameters(doc.get("parameters"), "parameters")
    binary_output = flag(params, "binary_data_output", "parameters", default=False)
    if "inputs" not in doc:
        raise ProtocolError("missing 'inputs'")
    raw_inputs = doc["inputs"]
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise ProtocolError("'inputs' must be a non-empty list")
    inputs: dict[str, Array] = {}
    for i, obj in enumerate(raw_inputs):
        input_name = name_of(obj, f"inputs[{i}]")
        spec = None
        if signature is not None:
            spec = signature.input(input_name)
            if spec is None:
                known = ", ".join(signature.input_names)
                raise ProtocolError(
                    f"unknown input '{input_name}'; the model's inputs are: {known}"
                )
        if input_name in inputs:
            raise ProtocolError(f"input '{input_name}' appears twice")
        where = f"input '{input_name}'"
        inputs[input_name] = decode_tensor(obj, where, binary, spec, allow_empty=False)
    if signature is not None:
        for input_name in signature.input_names:
            if input_name not in inputs:
                raise ProtocolError(f"missing input '{input_name}'")
    binary.finish()
    outputs = requested_outputs(doc, signature)
    return InferRequest(request_id, inputs, outputs, binary_output, params)


def decode_infer_response(
    body: bytes, header_length: str | int | None = None, only: Collection[str] | None = None
) -> InferResponse:
    """Decode an infer response (JSON or binary outputs) into numpy arrays; with ``only``, just
    the outputs it names (the others' binary bytes are skipped, their data never converted)."""
    doc, binary = _load(body, header_length)
    model_name = doc.get("model_name")
    if not isinstance(model_name, str):
        raise ProtocolError("response has no string 'model_name'")
    version, response_id = doc.get("model_version"), doc.get("id")
    raw_outputs = doc.get("outputs")
    if not isinstance(raw_outputs, list):
        raise ProtocolError("response has no 'outputs' list")
    outputs: dict[str, Array] = {}
    for i, obj in enumerate(raw_outputs):
        output = name_of(obj, f"outputs[{i}]")
        if only is not None and output not in only:
            _skip(obj, f"output '{output}'", binary)
            continue
        outputs[output] = decode_tensor(obj, f"output '{output}'", binary, None, allow_empty=True)
    binary.finish()
    return InferResponse(
        model_name,
        None if version is None else str(version),
        None if response_id is None else str(response_id),
        outputs,
        parameters(doc.get("parameters"), "parameters"),
    )


def _skip(obj: dict[str, Any], where: str, binary: BinaryReader) -> None:
    """Passes over an output not asked for: its binary bytes, if any, without reading them."""
    size = parameters(obj.get("parameters"), f"{where} parameters").get("binary_data_size")
    if size is not None:
        if type(size) is not int or size < 0:
            raise ProtocolError(f"{where}: binary_data_size must be a non-negative integer")
        binary.take(size, where)


def _load(body: bytes, header_length: str | int | None) -> tuple[dict[str, Any], BinaryReader]:
    view = memoryview(body)
    json_part, rest = view, view[len(view) :]
    if header_length is not None:
        try:
            n = int(header_length)
        except ValueError:
            n = -1
        if not 0 <= n <= len(view):
            raise ProtocolError(
                f"Inference-Header-Content-Length {header_length!r} is not a length within "
                f"the {len(view)}-byte body"
            )
        json_part, rest = view[:n], view[n:]
    try:
        doc = orjson.loads(json_part)
    except orjson.JSONDecodeError as exc:
        hint = ""
        if header_length is None:
            hint = " (a body with binary tensors needs an Inference-Header-Content-Length header)"
        raise ProtocolError(f"malformed JSON: {exc}{hint}") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"the body must be a JSON object, got {type(doc).__name__}")
    return doc, BinaryReader(rest, header_length is not None)


# ---------------------------------------------------------------------------------- encoding


def encode_infer_response(
    model_name: str,
    model_version: str | None,
    outputs: Iterable[tuple[str, Array, bool]],
    *,
    request_id: str | None = None,
    parameters: Mapping[str, Any] | None = None,
) -> EncodedBody:
    """Encode ``(name, array, binary)`` outputs; binary ones go after the JSON header."""
    doc: dict[str, Any] = {"model_name": model_name}
    if model_version is not None:
        doc["model_version"] = model_version
    if request_id is not None:
        doc["id"] = request_id
    if parameters:
        doc["parameters"] = dict(parameters)
    chunks: list[bytes] = []
    doc["outputs"] = [encode_tensor(name, arr, binary, chunks) for name, arr, binary in outputs]
    return _finish(doc, chunks)


def encode_infer_request(
    inputs: Mapping[str, Array],
    outputs: Sequence[str] | None = None,
    *,
    binary_inputs: bool = False,
    binary_outputs: bool = False,
    request_id: str | None = None,
) -> EncodedBody:
    """Encode a request as tritonclient would (binary inputs and/or binary outputs)."""
    doc: dict[str, Any] = {}
    if request_id is not None:
        doc["id"] = request_id
    chunks: list[bytes] = []
    doc["inputs"] = [encode_tensor(n, a, binary_inputs, chunks) for n, a in inputs.items()]
    if outputs is not None:
        flag = {"binary_data": binary_outputs}
        doc["outputs"] = [{"name": n, "parameters": flag} for n in outputs]
    elif binary_outputs:
        doc["parameters"] = {"binary_data_output": True}
    return _finish(doc, chunks)


def _finish(doc: dict[str, Any], chunks: list[bytes]) -> EncodedBody:
    head = orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
    if not chunks:
        return EncodedBody(head)
    return EncodedBody(b"".join([head, *chunks]), len(head))

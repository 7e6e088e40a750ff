"""Structural checks of a V2 infer request at the gateway, before any replica sees it.

The gateway checks what it can without the model's signature (valid JSON, the shape of the
message, binary-extension sizes) so a malformed request gets a precise 400 here instead of
costing a replica attempt; the replica checks the rest against its model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import BadRequest

HEADER_LENGTH = "inference-header-content-length"


@dataclass(frozen=True, slots=True)
class InferRequestInfo:
    """What the gateway keeps from a validated request."""

    id: str | None
    header: dict[str, Any]
    binary_length: int  # bytes of binary tensor data after the JSON header


def parse_infer_request(body: bytes, header_length: str | None) -> InferRequestInfo:
    json_part, binary_length = _split(body, header_length)
    if not json_part:
        raise BadRequest("request body is empty: expected a V2 inference request (JSON)")
    try:
        header = orjson.loads(json_part)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise BadRequest("request body must be a JSON object")
    request_id = header.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise BadRequest("'id' must be a string")
    _check_inputs(header.get("inputs"), binary_length)
    _check_outputs(header.get("outputs"))
    return InferRequestInfo(request_id, header, binary_length)


def _split(body: bytes, header_length: str | None) -> tuple[bytes, int]:
    if header_length is None:
        return body, 0
    try:
        length = int(header_length)
    except ValueError as exc:
        raise BadRequest(f"header {HEADER_LENGTH} must be an integer") from exc
    if not 0 < length <= len(body):
        raise BadRequest(f"header {HEADER_LENGTH}={length} does not fit a {len(body)}-byte body")
    return body[:length], len(body) - length


def _check_inputs(inputs: Any, binary_length: int) -> None:
    if not isinstance(inputs, list) or not inputs:
        raise BadRequest("'inputs' must be a non-empty list of tensors")
    binary_total = 0
    for index, tensor in enumerate(inputs):
        where = f"inputs[{index}]"
        if not isinstance(tensor, dict):
            raise BadRequest(f"{where} must be an object")
        name = tensor.get("name")
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{where}.name must be a non-empty string")
        where = f"input {name!r}"
        if not isinstance(tensor.get("datatype"), str):
            raise BadRequest(f"{where}: 'datatype' must be a string such as \"FP32\"")
        shape = tensor.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise BadRequest(f"{where}: 'shape' must be a list of non-negative integers")
        binary_size = _binary_size(tensor.get("parameters"), where)
        if binary_size is None:
            if "data" not in tensor:
                raise BadRequest(f"{where}: 'data' is missing")
            if not isinstance(tensor["data"], list):
                raise BadRequest(f"{where}: 'data' must be a list")
        else:
            binary_total += binary_size
    if binary_total != binary_length:
        raise BadRequest(
            f"binary tensor data is {binary_length} bytes but inputs declare {binary_total}"
        )


def _binary_size(parameters: Any, where: str) -> int | None:
    if parameters is None:
        return None
    if not isinstance(parameters, dict):
        raise BadRequest(f"{where}: 'parameters' must be an object")
    size = parameters.get("binary_data_size")
    if size is None:
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadRequest(f"{where}: parameters.binary_data_size must be a non-negative integer")
    return size


def _check_outputs(outputs: Any) -> None:
    if outputs is None:
        return
    if not isinstance(outputs, list):
        raise BadRequest("'outputs' must be a list")
    for index, output in enumerate(outputs):
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            raise BadRequest(f"outputs[{index}].name must be a string")

"""Structural checks of a V2 infer request at the gateway, before any replica sees it.

The gateway checks what it can without the model's signature (valid JSON, the shape of the
message, parameters, binary-extension sizes, the row limit and at least one row, each input and
each requested output named once, every JSON element against the declared datatype and shape
(`gateway.v2.elements`), finite floating-point values, nesting at most `MAX_JSON_DEPTH` levels
(`gateway.v2.nesting`)) so a malformed request gets a precise
400 here instead of costing a replica attempt (or a 200 with ``null`` outputs, or a server's
internal error); the replica checks the rest against its model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import BadRequest
from gateway.v2.body import Body
from gateway.v2.elements import ALLOWED_DATATYPES, check_datatype, check_json_data
from gateway.v2.finite import check_binary_finite
from gateway.v2.json_fast import decode_checked
from gateway.v2.nesting import (
    OUTPUT_MEMBERS,
    REQUEST_MEMBERS,
    TENSOR_MEMBERS,
    check_members,
    check_nesting,
    too_deep,
)
from v2proto.codec import HEADER_LENGTH as HEADER_LENGTH

# From this size a JSON body is checked without decoding its numbers, where it can be: below
# it, orjson's full parse costs about as much (and keeps the data for the vote and the dialects).
FAST_JSON_MIN_BYTES = 32 * 1024


@dataclass(slots=True)
class InferRequestInfo:
    """What the gateway keeps from a validated request (one or two per request, never written
    after: not frozen, whose construction costs a call per field; it holds a dict, so it is
    not hashable either way).

    A request parsed in a worker process comes back with its inputs' ``data`` left out of
    ``header`` (carrying it back would cost the event loop what the worker saved), and so does
    a large JSON request the fast path checked without decoding its numbers
    (`check_infer_request`); see `detached`. `parse_infer_request` always keeps the data.
    """

    id: str | None
    header: dict[str, Any]
    # bytes of binary tensor data after the JSON header
    binary_length: int


def detached(header: dict[str, Any]) -> bool:
    """Whether ``header`` lost its inputs' data: an input with neither data nor binary size.

    (Structural, so it survives copies of the header; a validated input has one of them.)
    """
    return any(
        "data" not in tensor and "binary_data_size" not in (tensor.get("parameters") or {})
        for tensor in header["inputs"]
    )


def check_infer_request(
    body: bytes | Body, header_length: str | None, max_rows: int | None = None
) -> InferRequestInfo:
    """What the edge checks a request with: `parse_infer_request`'s verdict, but a JSON body of
    `FAST_JSON_MIN_BYTES` or more whose data the fast path vouches for (`gateway.v2.json_fast`)
    comes back `detached` (its numbers never decoded)."""
    size = body.size if type(body) is Body else len(body)
    if header_length is None and size >= FAST_JSON_MIN_BYTES:
        info = fast_json_request(body, max_rows)
        if info is not None:
            return info
    return parse_infer_request(body, header_length, max_rows)


def fast_json_request(body: bytes | Body, max_rows: int | None = None) -> InferRequestInfo | None:
    """A JSON body checked by the fast path (`gateway.v2.json_fast`), `detached`; None where
    the fast path cannot vouch for it (`parse_infer_request` then gives the verdict)."""
    data = body if isinstance(body, bytes) else body.joined()
    header = decode_checked(data)
    if header is None:
        return None
    try:
        # what orjson could not have read (an int past 64 bits)
        orjson.dumps(header)
    except orjson.JSONEncodeError:
        return None
    return _checked(header, Body.of(data), len(data), 0, max_rows, detached_ok=True)


def parse_infer_request(
    body: bytes | Body, header_length: str | None, max_rows: int | None = None
) -> InferRequestInfo:
    """The request's JSON header, checked. With binary tensors (``header_length``) only the
    header is parsed; the tensor bytes are checked by arithmetic (sizes) and, for floats,
    with numpy over views of the received buffers (`check_binary_finite`), never copied."""
    if not isinstance(body, Body):
        body = Body.of(body)
    json_part, binary_length = _split(body, header_length)
    if not json_part:
        raise BadRequest("request body is empty: expected a V2 inference request (JSON)")
    try:
        header = orjson.loads(json_part)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            # orjson's own bound, past ours
            raise too_deep("request body") from exc
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise BadRequest("request body must be a JSON object")
    # a JSON boolean is one of these two literals: without either, no element is one
    booleans = json_part.find(b"true") >= 0 or json_part.find(b"false") >= 0
    return _checked(header, body, len(json_part), binary_length, max_rows, booleans=booleans)


def _checked(
    header: dict[str, Any],
    body: Body,
    start: int,
    binary_length: int,
    max_rows: int | None,
    *,
    detached_ok: bool = False,
    booleans: bool = True,
) -> InferRequestInfo:
    # Exact types (`type(x) is`), not isinstance: a decoded JSON value is never a subclass, and
    # these checks run on every request (loadtests/bench_calls.py).
    request_id = header.get("id")
    if request_id is not None and type(request_id) is not str:
        raise BadRequest("'id' must be a string")
    if "parameters" in header:
        _check_parameters(header["parameters"], 2, "'parameters'", "binary_data_output")
    _check_inputs(header.get("inputs"), body, start, max_rows, detached_ok, booleans)
    if "outputs" in header:
        _check_outputs(header["outputs"])
    if not header.keys() <= REQUEST_MEMBERS:
        check_members(header, REQUEST_MEMBERS, 1, "the request")
    return InferRequestInfo(request_id, header, binary_length)


def _split(body: Body, header_length: str | None) -> tuple[bytes, int]:
    if header_length is None:
        return body.joined(), 0
    try:
        length = int(header_length)
    except ValueError as exc:
        raise BadRequest(f"header {HEADER_LENGTH} must be an integer") from exc
    if not 0 < length <= body.size:
        raise BadRequest(f"header {HEADER_LENGTH}={length} does not fit a {body.size}-byte body")
    return body.head(length), body.size - length


def _check_inputs(
    inputs: Any,
    body: Body,
    start: int,
    max_rows: int | None,
    detached_ok: bool = False,
    booleans: bool = True,
) -> None:
    """Every input's structure; binary ones' sizes against the ``body`` bytes after ``start``.
    ``detached_ok``: inputs without ``data`` had it checked already (`json_fast`);
    ``booleans``: whether the JSON may hold a boolean (`check_json_data`)."""
    if type(inputs) is not list or not inputs:
        raise BadRequest("'inputs' must be a non-empty list of tensors")
    offset = 0
    for index, tensor in enumerate(inputs):
        name, datatype, shape = _input_head(tensor, index, max_rows)
        parameters = tensor.get("parameters")
        binary_size = None if parameters is None else _binary_size(parameters, name)
        if binary_size is None and detached_ok and "data" not in tensor:
            pass
        elif binary_size is None:
            data = tensor.get("data")
            if type(data) is not list:
                missing = "data" not in tensor
                problem = "'data' is missing" if missing else "'data' must be a list"
                raise BadRequest(f"input {name!r}: {problem}")
            check_json_data(data, datatype, shape, name, booleans=booleans)
        else:
            at = start + offset
            check_binary_finite(body.views(at, at + binary_size), datatype, name)
            offset += binary_size
    if offset != body.size - start:
        raise BadRequest(
            f"binary tensor data is {body.size - start} bytes but inputs declare {offset}"
        )
    if len(inputs) > 1:
        _check_unique(inputs, "input")


def _input_head(tensor: Any, index: int, max_rows: int | None) -> tuple[str, str, list[Any]]:
    """Input ``index``'s name, datatype and shape, checked with its rows and members."""
    # The messages' "where" is built only on failure: a valid request pays no f-strings.
    if type(tensor) is not dict:
        raise BadRequest(f"inputs[{index}] must be an object")
    name = tensor.get("name")
    if type(name) is not str or not name:
        raise BadRequest(f"inputs[{index}].name must be a non-empty string")
    datatype = tensor.get("datatype")
    if type(datatype) is not str:
        raise BadRequest(f"input {name!r}: 'datatype' must be a string such as \"FP32\"")
    if datatype not in ALLOWED_DATATYPES:
        # raises, naming the datatypes
        check_datatype(datatype, name)
    shape = tensor.get("shape")
    if type(shape) is not list or not _dims(shape):
        raise BadRequest(f"input {name!r}: 'shape' must be a list of non-negative integers")
    if shape:
        rows = shape[0]
        if rows == 0:
            raise BadRequest(f"input {name!r}: shape {shape} has no rows; send at least one")
        if max_rows is not None and rows > max_rows:
            raise BadRequest(
                f"input {name!r}: {rows} rows; this model takes at most {max_rows} rows a request"
            )
    if not tensor.keys() <= TENSOR_MEMBERS:
        check_members(tensor, TENSOR_MEMBERS, 3, f"input {name!r}")
    return name, datatype, shape


def _dims(shape: list[Any]) -> bool:
    """Whether every dimension is a non-negative int (a bool is not one)."""
    for d in shape:
        if type(d) is not int and (not isinstance(d, int) or isinstance(d, bool)):
            return False
        if d < 0:
            return False
    return True


def _check_parameters(
    parameters: Any, level: int, where: str, flag: str | None = None
) -> dict[str, Any]:
    """``parameters`` (at ``level`` of the request) must be an object, its values nested
    within the bound; its binary-data ``flag``, if there, a boolean."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise BadRequest(f"{where} must be an object, not {type(parameters).__name__}")
    if flag in parameters and not isinstance(parameters[flag], bool):
        raise BadRequest(f"{where}.{flag} must be true or false")
    for value in parameters.values():
        if type(value) is dict or type(value) is list:
            check_nesting(value, level + 1, where)
    return parameters


def _binary_size(parameters: Any, name: str) -> int | None:
    where = f"input {name!r}"
    size = _check_parameters(parameters, 4, f"{where}: 'parameters'").get("binary_data_size")
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
        where = f"outputs[{index}]"
        _check_parameters(output.get("parameters"), 4, f"{where}.parameters", "binary_data")
        if not output.keys() <= OUTPUT_MEMBERS:
            check_members(output, OUTPUT_MEMBERS, 3, where)
    if len(outputs) > 1:
        _check_unique(outputs, "output")


def _check_unique(tensors: list[dict[str, Any]], kind: str) -> None:
    """Every tensor of ``kind`` (input or output, each already checked to have a string name)
    named once: a server refuses a name twice, or answers it as an internal error."""
    names = {tensor["name"] for tensor in tensors}
    if len(names) == len(tensors):
        return
    seen: set[str] = set()
    for index, tensor in enumerate(tensors):
        name = tensor["name"]
        if name in seen:
            raise BadRequest(f"{kind}s[{index}].name: {kind} {name!r} is named more than once")
        seen.add(name)

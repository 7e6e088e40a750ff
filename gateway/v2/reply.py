"""Checks a replica's infer reply, and rewrites it so the client sees its own model name.

Replicas may call the model something else (``digits-mlp`` version 3 behind the client's
``digits`` version 1); only the JSON header part is touched, binary tensor bytes pass through.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any

import msgspec
import orjson

from gateway.redact import printable
from v2proto.codec import HEADER_LENGTH

# Compact replies (orjson, our replicas) start like this; the hot path splices the prefix
# instead of decoding and re-encoding the whole JSON header.
_PREFIX = re.compile(rb'^\{"model_name":"[^"\\]*"(,"model_version":"[^"\\]*")?')


def rename_reply(
    body: bytes, header_length: str | None, model_name: str, version: str
) -> tuple[bytes, str | None]:
    """Returns the new body and the new Inference-Header-Content-Length (or None)."""
    match = _PREFIX.match(body)
    # bytes.find, not ``in``: ``in`` first tries the operand as an integer (a TypeError raised
    # and cleared on every call)
    if match is not None and (match[1] is not None or body.find(b'"model_version"') < 0):
        prefix = orjson.dumps({"model_name": model_name, "model_version": version})[:-1]
        # one copy of the tensors
        new = b"".join((prefix, memoryview(body)[match.end() :]))
        if header_length is None:
            return new, None
        if header_length.isdigit():
            return new, str(int(header_length) + len(new) - len(body))
    split = len(body)
    if header_length is not None:
        try:
            split = int(header_length)
        except ValueError:
            return body, header_length
    header = raw_members(memoryview(body)[:split])
    if header is None:
        return body, header_length
    header["model_name"] = msgspec.Raw(orjson.dumps(model_name))
    header["model_version"] = msgspec.Raw(orjson.dumps(version))
    new_header = msgspec.json.encode(header)
    if header_length is None:
        return new_header, None
    return b"".join((new_header, memoryview(body)[split:])), str(len(new_header))


_RAW_MEMBERS = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


def raw_members(header: bytes | memoryview) -> dict[str, msgspec.Raw] | None:
    """A JSON object's members, each value left as its raw bytes (None: not a JSON object).

    What a member is changed through: a reply's outputs are never decoded into numbers, so a
    large JSON answer costs one scan and one copy, not an object per number; such objects,
    freed among others that outlive the request, keep the allocator's arenas from going back
    to the OS after the answer is written.
    """
    try:
        return _RAW_MEMBERS(header)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


# an output without data (a decoded value never starts so)
_NO_DATA = msgspec.Raw(b"-")
_LIST = ord("[")


class _Sizes(msgspec.Struct):
    binary_data_size: Annotated[int, msgspec.Meta(ge=0)] | None = None


class _Output(msgspec.Struct):
    name: str
    # skipped over, not decoded: only its first byte is read
    data: msgspec.Raw = _NO_DATA
    parameters: _Sizes | None = None


class _Reply(msgspec.Struct):
    outputs: list[_Output]
    id: str | None = None


_DECODE_REPLY = msgspec.json.Decoder(_Reply).decode


def check_reply(
    body: bytes, header_length: str | None, expected_id: str | None, *, echoes_id: bool = True
) -> str | None:
    """Why a replica's 200 is not a V2 infer reply to *this* request, or None if it is one.

    The declared structure is decoded once, typed (msgspec: an object with an ``outputs`` list
    of named tensors, string ids, non-negative integer sizes; tensor data skipped over, not
    decoded); a reply that is well-formed and this request's costs that and a loop over its
    outputs. Anything else is judged again by `why_not_reply`, which says what is wrong.
    """
    size = len(body)
    split = size
    if header_length is not None:
        if not header_length.isdigit() or not 0 < int(header_length) <= size:
            return why_not_reply(body, header_length, expected_id, echoes_id=echoes_id)
        split = int(header_length)
    try:
        reply = _DECODE_REPLY(body if split == size else memoryview(body)[:split])
    except (msgspec.ValidationError, msgspec.DecodeError):
        return why_not_reply(body, header_length, expected_id, echoes_id=echoes_id)
    reply_id = reply.id
    if expected_id is not None and reply_id != expected_id and (reply_id is not None or echoes_id):
        return why_not_reply(body, header_length, expected_id, echoes_id=echoes_id)
    binary = 0
    for output in reply.outputs:
        sizes = output.parameters
        declared = None if sizes is None else sizes.binary_data_size
        if declared is not None:
            binary += declared
        elif memoryview(output.data)[0] != _LIST:
            return why_not_reply(body, header_length, expected_id, echoes_id=echoes_id)
    if binary != size - split:
        return why_not_reply(body, header_length, expected_id, echoes_id=echoes_id)
    return None


def why_not_reply(
    body: bytes, header_length: str | None, expected_id: str | None, *, echoes_id: bool = True
) -> str | None:
    """What `check_reply` finds wrong, in words (None: nothing), checked field by field.

    The last line of defence against a desynchronised or truncated stream: the JSON header must
    parse as an object with an ``outputs`` list of named tensors, each with data or a binary
    size; binary sizes must add up to the bytes after the header; and the reply must carry the
    request's ``id`` (the V2 protocol has the server return it), since an answer without one
    could be any request's. Only a pool declared ``echoes_id: false`` may answer without it;
    its connections carry one exchange each, so nothing but this request's answer can arrive
    on them. ``expected_id`` None: the request has no id to compare (layer tests only).
    """
    split = _split_header(body, header_length)
    if isinstance(split, str):
        return split
    header, at = split
    problem = _id_problem(header.get("id"), expected_id, echoes_id)
    if problem is not None:
        return problem
    outputs = header.get("outputs")
    if not isinstance(outputs, list):
        return "the reply has no 'outputs' list"
    return _outputs_problem(outputs, len(body) - at)


def _split_header(body: bytes, header_length: str | None) -> tuple[dict[str, Any], int] | str:
    """The reply's JSON header and where it ends, or what is wrong with them."""
    split = len(body)
    if header_length is not None:
        if not header_length.isdigit() or not 0 < int(header_length) <= len(body):
            return f"{HEADER_LENGTH}={header_length!r} does not fit a {len(body)}-byte body"
        split = int(header_length)
    try:
        header = orjson.loads(body[:split])
    except orjson.JSONDecodeError:
        return f"the reply is not JSON ({len(body)} bytes)"
    if not isinstance(header, dict):
        return "the reply is not a JSON object"
    return header, split


def _id_problem(reply_id: object, expected_id: str | None, echoes_id: bool) -> str | None:
    """What is wrong with the reply's id, for a request whose id is ``expected_id``."""
    if expected_id is None or reply_id == expected_id:
        return None
    if reply_id is not None:
        return f"the reply's id {str(reply_id)[:64]!r} is not the request's {expected_id!r}"
    if echoes_id:
        return (
            f"the reply has no id (the request's is {expected_id!r}): it could be any "
            "request's answer (a server that never echoes ids needs echoes_id: false)"
        )
    return None


def _outputs_problem(outputs: list[Any], tail_bytes: int) -> str | None:
    """What is wrong with the outputs: each named, with data or a binary size, and the binary
    sizes adding up to the ``tail_bytes`` after the header."""
    binary = 0
    for output in outputs:
        if not isinstance(output, dict) or not isinstance(output.get("name"), str):
            return "an output has no name"
        parameters = output.get("parameters")
        size = parameters.get("binary_data_size") if isinstance(parameters, dict) else None
        if size is None:
            if not isinstance(output.get("data"), list):
                return f"output {output['name']!r} has neither data nor a binary size"
        elif isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            binary += size
        else:
            return f"output {output['name']!r} has a bad binary_data_size"
    if binary != tail_bytes:
        return f"binary outputs declare {binary} bytes but {tail_bytes} follow the header"
    return None


def with_reply_id(
    body: bytes, header_length: str | None, request_id: str
) -> tuple[bytes, str | None]:
    """A checked reply carrying ``request_id``, for a server that does not echo ids: the client
    gets its id back as from any V2 server. (Its JSON header re-encoded; only such pools pay.)"""
    split = len(body) if header_length is None else int(header_length)
    header = orjson.loads(body[:split])
    if header.get("id") == request_id:
        return body, header_length
    new_header = orjson.dumps({"id": request_id, **{k: v for k, v in header.items() if k != "id"}})
    if header_length is None:
        return new_header, None
    return new_header + body[split:], str(len(new_header))


def overflowed_output(
    body: bytes, header_length: str | None, expected_id: str | None, *, echoes_id: bool = True
) -> str | None:
    """The first output of this very request's answer whose JSON data holds null, ``NaN`` or
    ``Infinity`` (how NaN and infinity leave JSON encoders: none is V2 tensor data), else None.
    Such a reply is the model's overflow, not a broken replica; another request's answer is not
    one, nor is one without an id unless its pool does not echo ids (as in `check_reply`).
    Read with the stdlib parser, which takes the literals orjson refuses; a bytes search
    first, so a reply with none of them costs no parse."""
    if b"null" not in body and b"NaN" not in body and b"Infinity" not in body:
        return None
    split = len(body)
    if header_length is not None and header_length.isdigit():
        split = min(int(header_length), len(body))
    try:
        header = json.loads(body[:split])
    except ValueError:
        return None
    if not isinstance(header, dict):
        return None
    if header.get("id", None if echoes_id else expected_id) != expected_id:
        return None
    return _unusable_output(header)


def _unusable_output(header: dict[str, Any]) -> str | None:
    outputs = header.get("outputs")
    for output in outputs if isinstance(outputs, list) else ():
        if not isinstance(output, dict) or "data" not in output:
            # a binary output: its bytes are IEEE floats, not JSON
            continue
        stack = [output["data"]]
        while stack:
            item = stack.pop()
            if item is None or (isinstance(item, float) and not math.isfinite(item)):
                return str(output.get("name"))
            if isinstance(item, list):
                stack.extend(item)
    return None


def error_text(body: bytes, limit: int = 200) -> str:
    """A replica's error message: the V2 ``{"error": ...}``, FastAPI's ``{"detail": ...}``
    (MLServer's and KServe's validation errors: a string, or a list of ``{"loc", "msg"}``),
    or else the body's start; escaped (`printable`), so that the logs and admin views quoting
    it show one line. Clients are told a fixed summary instead (`Outcome.summary`)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        for key in ("error", "detail", "message"):
            text = _message(parsed.get(key))
            if text:
                return printable(text[:limit])
    return printable(body[:limit].decode("utf-8", "replace").strip())


def _message(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        # FastAPI: [{"loc": [...], "msg": "...", "type": "..."}]
        parts = []
        for item in value:
            if isinstance(item, dict) and isinstance(item.get("msg"), str):
                loc = item.get("loc")
                where = ".".join(str(x) for x in loc) if isinstance(loc, list) else ""
                parts.append(f"{where}: {item['msg']}" if where else item["msg"])
        return "; ".join(parts) or None
    return None

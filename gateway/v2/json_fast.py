"""A large JSON request checked at C speed: its structure decoded, its ``data`` never as numbers.

A 1×3×224×224 image as JSON is 1.2 MB of text and 150,528 numbers. Decoding it with orjson
makes a Python float of each (≈ 4 ms here) and checking them against the datatype walks them
again (≈ 9 ms); neither is needed to accept it. Here msgspec decodes the message's structure
(names, shapes, datatypes, parameters, id, outputs) and hands each input's ``data`` over as
`msgspec.Raw`, the bytes of that JSON value, checked as valid JSON but not decoded (≈ 0.9 ms
for the whole body). The bytes then settle what the gateway checks, with C-speed bytes methods:

- only number characters and commas in a flat list: every element is a JSON number (no
  string, boolean, null or nested list), which FP16/FP32/FP64/BF16 take;
- the commas count the elements against the shape;
- no positive exponent and no run of 39 digits: every number is below 1e38 in magnitude, so
  finite in FP32 (and FP64).

This path only accepts. Anything else (integer or boolean datatypes, nested data, a number the
rules above cannot vouch for, a structure msgspec refuses, an unknown member) returns None and
the request is parsed the full way (`gateway.v2.request.parse_infer_request`), which gives the
precise 400 or accepts it: the verdict is always the full parse's (fuzzed in
tests/gateway/v2/test_json_fast.py). The header comes back without the inputs' ``data``
(`gateway.v2.request.detached`), as from the worker process.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

_UNSET: Any = msgspec.UNSET
_FLOATS = frozenset({"FP16", "FP32", "FP64", "BF16"})
_NUMBER_BYTES = b"0.eE+-, \t\r\n"  # after the digits became 0
_DIGIT_RUN = b"0" * 39  # a 39-digit integer part could reach FP32's 3.4e38
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0000000000")


class _Tensor(msgspec.Struct, forbid_unknown_fields=True):
    name: Any = _UNSET
    shape: Any = _UNSET
    datatype: Any = _UNSET
    parameters: Any = _UNSET
    data: msgspec.Raw = _UNSET


class _Request(msgspec.Struct, forbid_unknown_fields=True):
    inputs: list[_Tensor]
    id: Any = _UNSET
    parameters: Any = _UNSET
    outputs: Any = _UNSET


_DECODER = msgspec.json.Decoder(_Request)


def decode_checked(body: bytes) -> dict[str, Any] | None:
    """The request's header without its inputs' data, when every input's data is a flat list
    of numbers that fits its floating-point datatype and shape; else None (parse it whole)."""
    try:
        request = _DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    inputs = []
    for tensor in request.inputs:
        if tensor.data is _UNSET or not _fits(tensor):
            return None
        inputs.append(_fields(tensor, ("name", "shape", "datatype", "parameters")))
    header = _fields(request, ("id", "parameters", "outputs"))
    header["inputs"] = inputs
    return header


def _fits(tensor: _Tensor) -> bool:
    """Whether ``tensor.data`` passes the gateway's checks for its datatype and shape."""
    datatype, shape = tensor.datatype, tensor.shape
    if datatype not in _FLOATS or datatype == "FP16" or tensor.parameters is not _UNSET:
        return False  # FP16's range needs the values; parameters may declare binary data
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        return False
    raw = bytes(tensor.data)  # one copy of the text, no object per number
    if raw[:1] != b"[" or raw[-1:] != b"]":
        return False
    inner = raw[1:-1].translate(_DIGITS_TO_ZERO)  # every digit a 0: runs show, and fewer bytes
    if inner.translate(None, _NUMBER_BYTES):  # to delete in the next pass
        return False  # a string, literal or nested list: the full parse judges it
    count = inner.count(b",") + 1 if inner.strip() else 0
    if count != math.prod(shape):
        return False
    if (b"e" in inner or b"E" in inner) and _positive_exponent(inner):
        return False
    return _DIGIT_RUN not in inner


def _positive_exponent(numbers: bytes) -> bool:
    unsigned = numbers.replace(b"e-", b"").replace(b"E-", b"")
    return b"e" in unsigned or b"E" in unsigned


def _fields(struct: msgspec.Struct, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: value for name in names if (value := getattr(struct, name)) is not _UNSET}

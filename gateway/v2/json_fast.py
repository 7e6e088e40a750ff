"""A large JSON request checked at C speed: its structure decoded, its ``data`` never as numbers.

A 1×3×224×224 image as JSON is megabytes, a number an element. Decoding it with orjson makes
a Python float of each and checking them against the datatype walks them again; neither is
needed to accept it. Here msgspec decodes the message's structure (names, shapes, datatypes,
parameters, id, outputs) and hands each input's ``data`` over as `msgspec.Raw`, the bytes of
that JSON value, checked as valid JSON but not decoded. Its bytes, seen by numpy without a copy,
then settle what the gateway checks in a few vector passes (loadtests/bench_payloads.py measures
the whole):

- no byte above ``9`` but the outer brackets, and no quote: every element is a JSON number (no
  string, boolean, null, nested list or exponent), which FP16/FP32/FP64/BF16 take; data with
  letters (exponents) is judged by bytes methods instead (`_fits_with_exponents`);
- the commas count the elements against the shape;
- no run of 39 digits: every number is below 1e38 in magnitude, so finite in FP32 (and FP64).

This path only accepts. Anything else (integer or boolean datatypes, nested data, a number the
rules above cannot vouch for, a structure msgspec refuses, an unknown member, a nesting deeper
than msgspec recurses: `RecursionError`, `gateway.v2.nesting`) returns None and
the request is parsed the full way (`gateway.v2.request.parse_infer_request`), which gives the
precise 400 or accepts it: the verdict is always the full parse's (fuzzed in
tests/gateway/v2/test_json_fast.py). The header comes back without the inputs' ``data``
(`gateway.v2.request.detached`), as from the worker process.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np

_UNSET: Any = msgspec.UNSET
_FLOATS = frozenset({"FP16", "FP32", "FP64", "BF16"})
_NUMBER_BYTES = b"0.eE+-, \t\r\n"  # after the digits became 0
_DIGIT_RUN = b"0" * 39  # a 39-digit integer part could reach FP32's 3.4e38
_DIGITS_TO_ZERO = bytes.maketrans(b"0123456789", b"0000000000")
_OPEN, _CLOSE, _QUOTE, _COMMA, _ZERO, _NINE = b'[]",09'
_ALL_DIGITS = np.uint64(0x0101010101010101)  # eight bools, all True, as one word


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
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
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
    text = np.frombuffer(memoryview(tensor.data), np.uint8)  # the JSON value's bytes, no copy
    if len(text) < 2 or text[0] != _OPEN or text[-1] != _CLOSE:
        return False
    if np.count_nonzero(text > _NINE) != 2:  # a letter or bracket besides the outer two
        return _fits_with_exponents(bytes(tensor.data), shape)
    if np.count_nonzero(text == _QUOTE):
        return False  # a string: the full parse judges it
    digits = (text - _ZERO) < 10  # uint8 arithmetic: bytes below "0" wrap past 10
    commas = np.count_nonzero(text == _COMMA)
    count = commas + 1 if commas or digits.any() else 0
    return count == math.prod(shape) and not _long_digit_run(digits)


def _long_digit_run(digits: np.ndarray[Any, np.dtype[np.bool_]]) -> bool:
    """Whether a run of 32 or more digits may be there (every run of 39 is caught).

    A run of 39 bytes holds four whole aligned 8-byte words, so four consecutive all-digit
    words are looked for, a word at a time: runs of 32 to 38 may be caught too, and go to the
    full parse (a float's shortest text has at most 17 significant digits).
    """
    whole = len(digits) // 8 * 8
    words = digits[:whole].view(np.uint64) == _ALL_DIGITS
    return len(words) >= 4 and bool((words[:-3] & words[1:-2] & words[2:-1] & words[3:]).any())


def _fits_with_exponents(raw: bytes, shape: list[int]) -> bool:
    """The rules with bytes methods, for data holding letters (exponents) or nested brackets."""
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

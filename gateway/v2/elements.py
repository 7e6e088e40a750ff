"""Every element of an input's JSON ``data`` must fit the datatype the request declares.

A server may coerce or reject elements that do not fit (the spec leaves it open), and some
reject them with a 500: MLServer answers a string in an FP32 tensor that way, which charged a
healthy replica for the client's mistake until its breaker opened. So the gateway refuses
them with a 400 naming the input before any replica sees them, by these rules (Triton's):

- BOOL takes ``true``/``false`` only; a number is not a boolean, nor a boolean a number.
- INT8 … UINT64 take JSON integers within the type's range (``2.0`` is not an integer).
- FP16, FP32, FP64 (and BF16) take JSON numbers that stay finite in the type (1e39 as FP32).
- BYTES takes strings only.
- ``data`` is flat (``[1, 2, 3, 4]``) or nested row-major (``[[1, 2], [3, 4]]``): every list at
  one depth has the same length, nesting follows the shape's leading dimensions, and its
  innermost lists hold the rest of a row; the element count is the shape's. The request nests
  at most `MAX_JSON_DEPTH` levels, its data with it (`gateway.v2.nesting`).
- a datatype the protocol does not name is refused (``"FLOAT32"``).

Cost: the element types are collected in one C pass (``set(map(type, flat))``) and ranges
with ``min``/``max`` (integers) or one C conversion (floats, `gateway.v2.finite`), so a
one-row request pays a few microseconds; a large body's flat floating-point data is checked
as raw bytes without these rules' Python objects where it can be (`gateway.v2.json_fast`,
same verdicts), and a large body is checked in the worker process
(`gateway.api.parse_process`), off the event loop.
"""

from __future__ import annotations

import math
from itertools import chain
from typing import Any

from gateway.errors import BadRequest
from gateway.v2.finite import check_json_finite, packs_whole
from gateway.v2.nesting import DATA_LEVEL, MAX_JSON_DEPTH, too_deep

_NUMBERS = frozenset({int, float})
_ALLOWED: dict[str, frozenset[type]] = {
    "BOOL": frozenset({bool}),
    "BYTES": frozenset({str}),
    **{t: _NUMBERS for t in ("FP16", "FP32", "FP64", "BF16")},
    **{t: frozenset({int}) for t in ("INT8", "INT16", "INT32", "INT64")},
    **{t: frozenset({int}) for t in ("UINT8", "UINT16", "UINT32", "UINT64")},
}
_RANGES = {
    **{f"INT{b}": (-(2 ** (b - 1)), 2 ** (b - 1) - 1) for b in (8, 16, 32, 64)},
    **{f"UINT{b}": (0, 2**b - 1) for b in (8, 16, 32, 64)},
}
_TAKES = {bool: "true or false", str: "strings", int: "integers", float: "numbers"}
_KINDS = {
    bool: "a boolean",
    str: "a string",
    int: "an integer",
    float: "a decimal number",
    list: "a list",
    dict: "an object",
    type(None): "null",
}
DATATYPE_NAMES = tuple(_ALLOWED)
# what `check_datatype` passes
ALLOWED_DATATYPES: frozenset[str] = frozenset(_ALLOWED)


def check_datatype(datatype: str, name: str) -> None:
    """`BadRequest` unless ``datatype`` is one the protocol names (JSON or binary data)."""
    if datatype not in _ALLOWED:
        raise BadRequest(
            f"input {name!r}: unknown datatype {datatype!r}; V2 datatypes: "
            f"{', '.join(DATATYPE_NAMES)}"
        )


def check_json_data(
    data: list[Any], datatype: str, shape: list[int], name: str, *, booleans: bool = True
) -> None:
    """`BadRequest` naming input ``name`` and the first element of ``data`` that does not
    fit ``datatype`` (checked by `check_datatype`) and ``shape`` (non-negative ints).

    ``booleans``: False when the request's text holds no ``true`` or ``false``, so no element
    can be a boolean: flat floating-point data of the shape's count is then checked by one
    packing (`packs_whole`), the same verdict without collecting its element types."""
    count = math.prod(shape)
    if not booleans and len(data) == count and packs_whole(data, datatype):
        return
    allowed = _ALLOWED[datatype]
    types = set(map(type, data))
    flat = data
    if list in types:
        flat, types = _flatten(data, types, shape, name)
    if len(flat) != count:
        raise BadRequest(
            f"input {name!r}: 'data' has {len(flat)} elements, shape {shape} needs {count}"
        )
    if not types <= allowed:
        index, value = next((i, v) for i, v in enumerate(flat) if type(v) not in allowed)
        raise BadRequest(
            f"input {name!r}: 'data' element {index} is {_kind(value)} ({_show(value)}); "
            f"{datatype} takes {_TAKES[max(allowed, key=list(_TAKES).index)]}"
        )
    bounds = _RANGES.get(datatype)
    if bounds is not None:
        if flat and (min(flat) < bounds[0] or max(flat) > bounds[1]):
            bad = next(v for v in flat if not bounds[0] <= v <= bounds[1])
            raise BadRequest(
                f"input {name!r}: {bad} is outside the {datatype} range [{bounds[0]}, {bounds[1]}]"
            )
    elif allowed is _NUMBERS:
        check_json_finite(flat, "FP32" if datatype == "BF16" else datatype, name)


def _flatten(
    data: list[Any], types: set[type], shape: list[int], name: str
) -> tuple[list[Any], set[type]]:
    """The elements of nested ``data`` and their types, refusing a nesting that is not the
    shape's."""
    level: list[Any] = data
    depth = 0
    while True:
        if types != {list}:
            raise BadRequest(f"input {name!r}: 'data' mixes lists and values at depth {depth + 1}")
        if DATA_LEVEL + depth >= MAX_JSON_DEPTH:
            # the lists in ``level`` are one deeper
            raise too_deep(f"input {name!r}: 'data'")
        if depth >= len(shape) or len(level) != math.prod(shape[: depth + 1]):
            raise BadRequest(
                f"input {name!r}: 'data' nested as {_nesting(data)} does not follow shape "
                f"{shape} (nest rows as the shape's leading dimensions, or send it flat)"
            )
        lengths = set(map(len, level))
        if len(lengths) > 1:
            raise BadRequest(f"input {name!r}: 'data' is ragged (lists of unequal length)")
        level = list(chain.from_iterable(level))
        depth += 1
        types = set(map(type, level))
        if list not in types:
            rest = math.prod(shape[depth:])
            if lengths != {rest}:
                raise BadRequest(
                    f"input {name!r}: 'data' nested as {_nesting(data)} does not follow shape "
                    f"{shape} (nest rows as the shape's leading dimensions, or send it flat)"
                )
            return level, types


def _nesting(data: Any) -> list[int]:
    dims = []
    while isinstance(data, list):
        dims.append(len(data))
        data = data[0] if data else None
    return dims


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."

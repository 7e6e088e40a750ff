"""Floating-point inputs must be finite: checks of JSON and binary tensor data.

A NaN or an infinity reaching a model comes back as NaN outputs, which JSON renders as
``null``: a 200 that is not valid V2. JSON has no NaN or infinity literals (orjson rejects
them, and numbers past float64's range), but a JSON number can still overflow a narrower
type (1e39 becomes inf as FP32), and binary tensor data can hold any bit pattern.
"""

from __future__ import annotations

import math
import struct
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from gateway.errors import BadRequest

_FLOATS: dict[str, np.dtype[np.floating[Any]]] = {
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}


def check_json_finite(data: list[Any], datatype: str, name: str) -> None:
    """`BadRequest` if a number in input ``name``'s ``data`` (flat or nested) overflows its type.

    FP64 needs no check (orjson already refuses what would overflow it). A flat FP32 list,
    the hot path's case, costs one C packing (`_fits_fp32`); nested rows, or a value out of
    range, take the conversion that finds which value it is: FP32 values as doubles cannot
    add up to infinity, so the sum is finite exactly when every converted value is.
    """
    if datatype == "FP32":
        if _fits_fp32(data):
            return
        values = _fp32(data)
        if values is not None:
            if not math.isfinite(sum(values)):
                flat = data if len(data) == len(values) else [v for row in data for v in row]
                bad = next(d for d, v in zip(flat, values, strict=True) if not math.isfinite(v))
                raise _out_of_range(name, bad, datatype)
            return
    dtype = _FLOATS.get(datatype)
    if dtype is None or datatype == "FP64":
        return
    try:
        numbers = np.asarray(data, dtype=np.float64)
    except (ValueError, TypeError):
        # ragged or not numbers: the replica names what is wrong
        return
    with np.errstate(over="ignore"):
        finite = np.isfinite(numbers.astype(dtype))
    if not finite.all():
        raise _out_of_range(name, numbers[~finite].flat[0].item(), datatype)


# struct codes of the datatypes whose flat JSON data one packing checks whole (`packs_whole`)
_PACKING = {"FP32": "f", "BF16": "f", "FP64": "d"}
# by (code, length)
_PACKERS: dict[tuple[str, int], struct.Struct] = {}
# shapes kept at most (forgotten all at once when full)
_PACKERS_KEPT = 64


def _fits_fp32(data: list[Any]) -> bool:
    """Whether flat numbers ``data`` all stay finite as FP32: packing as IEEE single precision
    refuses (`OverflowError`) a value that rounds to infinity, the model's conversion. False
    for nested rows or anything else it cannot pack: the caller looks closer."""
    return packs_whole(data, "FP32")


def packs_whole(data: list[Any], datatype: str) -> bool:
    """Whether flat ``data`` packs whole as ``datatype`` (FP32 and BF16 as IEEE single
    precision, FP64 as double): every element then is a number (or a boolean: packing takes
    those, so the caller rules them out) that stays finite in the type. False for anything
    else (another datatype, nesting, a string, null, an overflow): the caller looks closer.

    One C call in place of collecting the element types and packing again (about 19,000
    instructions for a 64-value row, `set(map(type, data))`)."""
    code = _PACKING.get(datatype)
    if code is None:
        return False
    key = (code, len(data))
    packer = _PACKERS.get(key)
    if packer is None:
        if len(_PACKERS) >= _PACKERS_KEPT:
            _PACKERS.clear()
        packer = _PACKERS[key] = struct.Struct(f"<{len(data)}{code}")
    try:
        packer.pack(*data)
    except (struct.error, OverflowError, TypeError):
        return False
    return True


def _fp32(data: list[Any]) -> array[float] | None:
    """``data`` (flat, or rows) as C floats: overflow becomes inf, as in the model; or None."""
    try:
        return array("f", data)
    except TypeError:
        pass
    values = array("f")
    try:
        for row in data:
            values.extend(row)
    except TypeError:
        # deeper nesting, or not numbers (the replica names those)
        return None
    return values


# segments smaller than this are checked joined (`_grouped`)
GROUP_BYTES = 128 * 1024


def check_binary_finite(raw: memoryview | Iterable[memoryview], datatype: str, name: str) -> None:
    """`BadRequest` if input ``name``'s binary ``datatype`` data holds a NaN or an infinity.

    ``raw`` is the tensor's bytes, or their segments in order (views of the buffers the body
    arrived in): each is checked in place, and only a value split between two segments is
    copied (its few bytes).
    """
    dtype = _FLOATS.get(datatype)
    if dtype is None:
        # not a float type
        return
    segments = [raw] if isinstance(raw, memoryview) else list(raw)
    if sum(map(len, segments)) % dtype.itemsize:
        # a size the replica will reject with a precise message
        return
    bad = 0
    carry = b""
    for segment in _grouped(segments):
        if carry:
            need = dtype.itemsize - len(carry)
            carry += bytes(segment[:need])
            segment = segment[need:]
            if len(carry) == dtype.itemsize:
                bad += _nonfinite(memoryview(carry), dtype)
                carry = b""
        whole = len(segment) - len(segment) % dtype.itemsize
        bad += _nonfinite(segment[:whole], dtype)
        carry += bytes(segment[whole:])
    if bad:
        raise BadRequest(
            f"input {name!r}: binary {datatype} data holds NaN or infinity ({bad} values)"
        )


def _grouped(segments: list[memoryview]) -> Iterator[memoryview]:
    """The segments, small neighbours joined into groups of at least `GROUP_BYTES`.

    A body arrives in reads of a few KiB to a few hundred, and numpy's fixed cost per call (a
    view, a result array, a count) dominates a small segment's check: an image body read in
    reads of a few KiB cost several times its check as one buffer, copy included (the figures:
    docs/measured.md, The data path). A segment as large as a group is checked in place;
    only smaller ones are copied, a group at a time.
    """
    group: list[memoryview] = []
    size = 0
    for segment in segments:
        if len(segment) >= GROUP_BYTES:
            # checked in place, after the group before it
            if group:
                yield _joined(group)
                group, size = [], 0
            yield segment
            continue
        group.append(segment)
        size += len(segment)
        if size >= GROUP_BYTES:
            yield memoryview(b"".join(group))
            group, size = [], 0
    if group:
        yield _joined(group)


def _joined(group: list[memoryview]) -> memoryview:
    """One segment as it is, several copied into one buffer."""
    return group[0] if len(group) == 1 else memoryview(b"".join(group))


def _nonfinite(raw: memoryview, dtype: np.dtype[np.floating[Any]]) -> int:
    """How many values of ``raw`` (whole ``dtype`` items) are NaN or infinite."""
    if not len(raw):
        return 0
    finite = np.isfinite(np.frombuffer(raw, dtype=dtype))
    return int(finite.size - np.count_nonzero(finite))


def _out_of_range(name: str, value: Any, datatype: str) -> BadRequest:
    return BadRequest(
        f"input {name!r}: {value!r} is outside the {datatype} range (it would be infinity)"
    )

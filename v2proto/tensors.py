"""One V2 tensor to and from its JSON object: inline ``data`` or binary tensor data.

Requests and responses carry tensors the same way, so both directions of the codec share this
module: a tensor object is validated (datatype, shape, optionally against a signature, element
count, element kinds) and turned into a numpy array, or an array is turned into the object plus
its raw bytes. Every malformed tensor raises `ProtocolError` naming the tensor and what is wrong.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from v2proto.errors import ProtocolError
from v2proto.fields import parameters
from v2proto.signature import DATATYPES, Array, TensorSpec, datatype_of

_INTEGER_KINDS = "iu"
_ALLOWED_KINDS = {"BOOL": "b", "FP16": "iuf", "FP32": "iuf", "FP64": "iuf"}
_KIND_WORDS = {
    "b": "booleans",
    "i": "integers",
    "u": "integers",
    "f": "non-integers",
    "U": "strings",
    "S": "strings",
    "O": "non-numeric values",
}
_LENGTH = struct.Struct("<I")


class BinaryReader:
    """Hands out the binary section's bytes in tensor order and checks none are left over."""

    def __init__(self, data: memoryview, has_header: bool) -> None:
        self._data = data
        self._offset = 0
        self._has_header = has_header

    def take(self, size: int, where: str) -> memoryview:
        left = len(self._data) - self._offset
        if size > left:
            if not self._has_header:
                raise ProtocolError(
                    f"{where}: binary_data_size {size} but the request has no binary data "
                    f"(no Inference-Header-Content-Length header)"
                )
            raise ProtocolError(f"{where}: binary_data_size {size} exceeds the {left} bytes left")
        chunk = self._data[self._offset : self._offset + size]
        self._offset += size
        return chunk

    def finish(self) -> None:
        left = len(self._data) - self._offset
        if left:
            raise ProtocolError(
                f"{left} bytes of binary data follow the JSON; no tensor claims them"
            )


def decode_tensor(
    obj: dict[str, Any],
    where: str,
    binary: BinaryReader,
    spec: TensorSpec | None,
    *,
    allow_empty: bool,
) -> Array:
    datatype = obj.get("datatype")
    if not isinstance(datatype, str) or datatype not in DATATYPES:
        raise ProtocolError(f"{where}: unknown datatype {datatype!r}")
    if spec is not None and datatype != spec.datatype:
        raise ProtocolError(
            f"{where}: datatype {datatype} does not match the model's {spec.datatype}"
        )
    shape = obj.get("shape")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ProtocolError(
            f"{where}: 'shape' must be a list of non-negative integers, got {shape!r}"
        )
    if spec is not None:
        _check_shape(shape, spec, where)
    if not allow_empty and shape and shape[0] == 0:
        raise ProtocolError(f"{where}: batch of 0 rows (shape {shape})")
    count = math.prod(shape)
    params = parameters(obj.get("parameters"), f"{where} parameters")
    size = params.get("binary_data_size")
    if size is not None:
        if "data" in obj:
            raise ProtocolError(f"{where}: has both 'data' and binary_data_size")
        if type(size) is not int or size < 0:
            raise ProtocolError(f"{where}: binary_data_size must be a non-negative integer")
        return _from_binary(binary.take(size, where), datatype, shape, count, where)
    if "data" not in obj:
        raise ProtocolError(f"{where}: missing 'data' (or parameters.binary_data_size)")
    return _from_json(obj["data"], datatype, shape, count, where)


def _check_shape(shape: list[int], spec: TensorSpec, where: str) -> None:
    want = list(spec.shape)
    if len(shape) != len(want):
        raise ProtocolError(
            f"{where}: shape {shape} has rank {len(shape)}, the model expects rank "
            f"{len(want)} {want}"
        )
    for dim, (got, expected) in enumerate(zip(shape, want, strict=True)):
        if expected not in (-1, got):
            raise ProtocolError(
                f"{where}: shape {shape} does not match the model's {want} "
                f"(dimension {dim} must be {expected})"
            )


def _from_binary(raw: memoryview, datatype: str, shape: list[int], count: int, where: str) -> Array:
    if datatype == "BYTES":
        return _bytes_elements(raw, count, where).reshape(shape)
    dtype = DATATYPES[datatype]
    expected = count * dtype.itemsize
    if len(raw) != expected:
        raise ProtocolError(
            f"{where}: binary_data_size {len(raw)} does not match shape {shape} of {datatype} "
            f"({expected} bytes)"
        )
    arr = np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=False)
    return arr.reshape(shape)


def _bytes_elements(raw: memoryview, count: int, where: str) -> Array:
    items: list[bytes] = []
    offset = 0
    while offset < len(raw):
        if offset + 4 > len(raw):
            raise ProtocolError(f"{where}: truncated BYTES element length")
        (n,) = _LENGTH.unpack_from(raw, offset)
        if offset + 4 + n > len(raw):
            raise ProtocolError(f"{where}: BYTES element of {n} bytes runs past the data")
        items.append(bytes(raw[offset + 4 : offset + 4 + n]))
        offset += 4 + n
    if len(items) != count:
        raise ProtocolError(
            f"{where}: binary data holds {len(items)} BYTES elements, the shape needs {count}"
        )
    out = np.empty(count, dtype=object)
    out[:] = items
    return out


def _from_json(data: object, datatype: str, shape: list[int], count: int, where: str) -> Array:
    if not isinstance(data, list):
        raise ProtocolError(f"{where}: 'data' must be a list")
    if datatype == "BYTES":
        flat = _flatten(data)
        if not all(isinstance(x, str) for x in flat):
            raise ProtocolError(f"{where}: 'data' must contain only strings for datatype BYTES")
        if len(flat) != count:
            raise ProtocolError(
                f"{where}: 'data' has {len(flat)} elements, shape {shape} needs {count}"
            )
        out = np.empty(count, dtype=object)
        out[:] = [x.encode() for x in flat]
        return out.reshape(shape)
    try:
        arr = np.asarray(data)
    except ValueError:
        raise ProtocolError(f"{where}: 'data' is ragged (nested lists of unequal length)") from None
    if arr.size != count:
        raise ProtocolError(f"{where}: 'data' has {arr.size} elements, shape {shape} needs {count}")
    allowed = _ALLOWED_KINDS.get(datatype, _INTEGER_KINDS)
    if count and arr.dtype.kind not in allowed:
        wanted = {"b": "booleans", "iu": "integers"}.get(allowed, "numbers")
        found = _KIND_WORDS.get(arr.dtype.kind, str(arr.dtype))
        raise ProtocolError(
            f"{where}: 'data' must hold only {wanted} for {datatype}, found {found}"
        )
    target = DATATYPES[datatype]
    if count and allowed == _INTEGER_KINDS:
        low, high = _int_range(target)
        if arr.min() < low or arr.max() > high:
            raise ProtocolError(f"{where}: 'data' has values out of range for {datatype}")
    return arr.astype(target.newbyteorder("="), copy=False).reshape(shape)


@functools.cache
def _int_range(dtype: np.dtype[Any]) -> tuple[int, int]:
    """An integer dtype's bounds, read once (`np.iinfo` is built anew on every call)."""
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _flatten(data: list[Any]) -> list[Any]:
    flat: list[Any] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def nonfinite_output(outputs: Mapping[str, Array]) -> str | None:
    """The first floating-point output holding NaN or infinity (None: all finite).

    A finite input of very large magnitude can overflow a model (the digits MLP's softmax of
    3.4e38 is NaN). JSON cannot carry NaN (it would leave as null, which is not V2 tensor data)
    and a label argmax'ed from it means nothing, so such an answer is refused, in either
    encoding, with `nonfinite_message`.
    """
    for name, arr in outputs.items():
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            return name
    return None


def nonfinite_message(output: str) -> str:
    return (
        f"output {output!r} is not finite (NaN or infinity) for this input: "
        "inputs of this magnitude overflow the model"
    )


def encode_tensor(name: str, arr: Array, binary: bool, chunks: list[bytes]) -> dict[str, Any]:
    datatype = datatype_of(arr.dtype)
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(arr.shape)}
    if binary:
        raw = _tensor_bytes(arr, datatype)
        entry["parameters"] = {"binary_data_size": len(raw)}
        chunks.append(raw)
    elif datatype == "BYTES":
        entry["data"] = [
            x.decode(errors="replace") if isinstance(x, bytes) else str(x) for x in arr.ravel()
        ]
    elif datatype == "FP16":
        entry["data"] = arr.ravel().astype(np.float32)
    else:
        entry["data"] = arr.ravel().astype(arr.dtype.newbyteorder("="), copy=False)
    return entry


def _tensor_bytes(arr: Array, datatype: str) -> bytes:
    if datatype == "BYTES":
        parts = []
        for x in arr.ravel():
            b = x if isinstance(x, bytes) else str(x).encode()
            parts.append(_LENGTH.pack(len(b)) + b)
        return b"".join(parts)
    return arr.astype(DATATYPES[datatype], copy=False).tobytes()

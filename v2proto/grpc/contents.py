"""One tensor's gRPC contents to and from numpy: the typed ``contents`` field of each datatype,
raw bytes (``numpy.frombuffer`` / ``tobytes``, no loop per element), and their checks."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.signature import DATATYPES, Array
from v2proto.tensors import BinaryReader, decode_tensor

Raw = bytes | memoryview  # a raw content: its own bytes, or a view of the received message

# The typed ``contents`` field of each datatype (FP16 has none: raw only).
TYPED_FIELD: Mapping[str, str] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def from_typed(
    contents: pb.InferTensorContents, datatype: str, shape: list[int], where: str
) -> Array:
    typed = TYPED_FIELD.get(datatype)
    if typed is None:
        raise ProtocolError(f"{where}: {datatype} has no typed contents; send raw contents")
    values = getattr(contents, typed)
    count = math.prod(shape)
    if len(values) != count:
        raise ProtocolError(
            f"{where}: contents.{typed} has {len(values)} elements, shape {shape} needs {count}"
        )
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    dtype = DATATYPES[datatype].newbyteorder("=")
    try:
        # fromiter reads the repeated field straight into the array: faster than np.array
        return np.fromiter(values, dtype=dtype, count=count).reshape(shape)
    except OverflowError:
        raise ProtocolError(
            f"{where}: contents.{typed} has values out of range for {datatype}"
        ) from None


def check_raw(raw: Raw, datatype: str, shape: list[int], where: str) -> None:
    if datatype == "BYTES":
        return  # the length-prefixed elements are counted where they are read
    expected = math.prod(shape) * DATATYPES[datatype].itemsize
    if len(raw) != expected:
        raise ProtocolError(
            f"{where}: raw contents of {len(raw)} bytes, shape {shape} of {datatype} needs "
            f"{expected}"
        )


def from_raw(raw: Raw, datatype: str, shape: list[int], where: str) -> Array:
    reader = BinaryReader(memoryview(raw), True)
    obj = {"datatype": datatype, "shape": shape, "parameters": {"binary_data_size": len(raw)}}
    return decode_tensor(obj, where, reader, None, allow_empty=True)


def array_bytes(array: Array, datatype: str) -> bytes:
    if datatype != "BYTES":
        return array.astype(DATATYPES[datatype], copy=False).tobytes()
    parts = []
    for item in array.ravel().tolist():
        b = item if isinstance(item, bytes) else str(item).encode()
        parts.append(len(b).to_bytes(4, "little") + b)
    return b"".join(parts)

"""Typed ``contents`` to raw bytes, a slice at a time, so a large typed message never stalls
the event loop.

A ``ModelInferRequest`` with typed contents (``fp32_contents`` ...) would become a JSON body:
numbers turned into text (a long stall of the loop for a large tensor, one call holding the
GIL, so a thread would not help), then parsed again by the edge. Here each tensor's values
become its raw bytes instead (`numpy.fromiter`), 65,536 values a slice with the loop free
between slices (docs/measured.md), and the message carries raw contents from then on: the edge gets
binary tensors, as from a raw-contents client. The values are the same; only their form
changes, as `v2proto.grpc.convert` does for raw contents.

A message left as it is: one already raw, one with a BYTES tensor (its elements are
length-prefixed strings, converted where they are read), one whose contents do not fit its
shape or datatype (the conversion names the field then, as for any bad message).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import numpy as np

from gateway.errors import BadRequest
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.contents import TYPED_FIELD
from v2proto.signature import DATATYPES

# values converted between two turns of the event loop
SLICE = 65_536


async def typed_to_raw(request: pb.ModelInferRequest, slice_values: int = SLICE) -> None:
    """Moves every input's typed contents into ``raw_input_contents`` (see the module)."""
    inputs = request.inputs
    if request.raw_input_contents or not inputs:
        return
    fields: list[Any] = []
    for tensor in inputs:
        typed = TYPED_FIELD.get(tensor.datatype)
        if typed is None or tensor.datatype == "BYTES":
            return
        values = getattr(tensor.contents, typed)
        if len(values) != math.prod(tensor.shape):
            # the conversion says what is wrong, naming the field
            return
        fields.append(values)
    raws = []
    for tensor, values in zip(inputs, fields, strict=True):
        where = f"input '{tensor.name}': contents.{TYPED_FIELD[tensor.datatype]}"
        raws.append(await _raw(values, tensor.datatype, where, slice_values))
    for tensor in inputs:
        tensor.ClearField("contents")
    request.raw_input_contents.extend(raws)


async def _raw(values: Any, datatype: str, where: str, slice_values: int) -> bytes:
    # little-endian, as raw contents are
    dtype = DATATYPES[datatype]
    count = len(values)
    if count <= slice_values:
        data: bytes = _values(iter(values), dtype, count, where, datatype).tobytes()
        return data
    out = np.empty(count, dtype)
    items = iter(values)
    for start in range(0, count, slice_values):
        stop = min(count, start + slice_values)
        out[start:stop] = _values(items, dtype, stop - start, where, datatype)
        # the other requests' turn
        await asyncio.sleep(0)
    data = out.tobytes()
    return data


def _values(items: Any, dtype: np.dtype[Any], count: int, where: str, datatype: str) -> Any:
    try:
        return np.fromiter(items, dtype.newbyteorder("="), count=count).astype(dtype, copy=False)
    except (OverflowError, ValueError) as exc:
        raise BadRequest(f"{where} has values out of range for {datatype}") from exc

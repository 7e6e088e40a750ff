"""Typed contents made raw a slice at a time (`gateway.grpc_door.typed`): the same values as
raw contents would carry, the loop free between slices, and messages it must leave alone."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
import pytest

from gateway.errors import BadRequest
from gateway.grpc_door.typed import typed_to_raw
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_to_rest_request


def typed(*tensors: tuple[str, str, list[int], str, Sequence[object]]) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m")
    for name, datatype, shape, field, values in tensors:
        entry = request.inputs.add(name=name, datatype=datatype, shape=shape)
        getattr(entry.contents, field).extend(values)
    return request


async def test_each_input_becomes_its_raw_bytes() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    ids = np.array([-3, 0, 5], dtype=np.int64)
    flags = np.array([True, False], dtype=np.bool_)
    request = typed(
        ("x", "FP32", [3, 4], "fp32_contents", x.ravel().tolist()),
        ("ids", "INT64", [3], "int64_contents", ids.tolist()),
        ("small", "INT8", [2], "int_contents", [-128, 127]),
        ("flags", "BOOL", [2], "bool_contents", flags.tolist()),
    )
    await typed_to_raw(request)
    expected = [
        x.tobytes(),
        ids.tobytes(),
        np.array([-128, 127], np.int8).tobytes(),
        flags.tobytes(),
    ]
    assert list(request.raw_input_contents) == expected
    assert not any(t.HasField("contents") for t in request.inputs)
    assert [t.name for t in request.inputs] == ["x", "ids", "small", "flags"]


async def test_a_large_tensor_is_converted_in_slices_with_the_loop_free_between() -> None:
    values = np.random.default_rng(1).random(10_000, dtype=np.float32)
    request = typed(("x", "FP32", [100, 100], "fp32_contents", values.tolist()))
    turns = 0

    async def other_request() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_request())
    await asyncio.sleep(0)
    before = turns
    await typed_to_raw(request, slice_values=1_000)
    other.cancel()
    assert turns - before >= 9  # a turn between each of the 10 slices
    assert request.raw_input_contents[0] == values.tobytes()


async def test_the_rest_body_is_binary_with_the_same_values() -> None:
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    request = typed(("input", "FP32", [1, 64], "fp32_contents", x.ravel().tolist()))
    await typed_to_raw(request)
    encoded = grpc_to_rest_request(request)
    assert encoded.json_length is not None and encoded.body.endswith(x.tobytes())


async def test_messages_it_leaves_alone() -> None:
    raw = pb.ModelInferRequest(model_name="m")
    raw.inputs.add(name="x", datatype="FP32", shape=[1])
    raw.raw_input_contents.append(b"\0\0\0\0")
    with_bytes = typed(
        ("x", "FP32", [1], "fp32_contents", [1.0]),
        ("s", "BYTES", [1], "bytes_contents", [b"a"]),
    )
    short = typed(("x", "FP32", [2, 2], "fp32_contents", [1.0, 2.0, 3.0]))
    for request in (raw, with_bytes, short):
        before = request.SerializeToString()
        await typed_to_raw(request)
        assert request.SerializeToString() == before


async def test_a_value_out_of_its_datatypes_range_is_a_400_naming_the_field() -> None:
    request = typed(("small", "UINT8", [2], "uint_contents", [1, 300]))
    with pytest.raises(BadRequest, match=r"input 'small': contents.uint_contents .* UINT8"):
        await typed_to_raw(request)

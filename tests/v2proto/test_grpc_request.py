"""A ModelInferRequest read straight into an InferRequest: the same arrays as the REST body it
stands for, and the same refusals with the same messages."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from v2proto.codec import parse_infer_request
from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_to_rest_request
from v2proto.grpc.request import grpc_infer_request
from v2proto.signature import Signature, TensorSpec

SIGNATURE = Signature(
    inputs=(TensorSpec("input", "FP32", (-1, 4)), TensorSpec("mask", "BOOL", (-1,))),
    outputs=(TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, 3))),
)


def message(raw: bool, **changes: Any) -> pb.ModelInferRequest:
    x = changes.get("x", np.arange(8, dtype=np.float32).reshape(2, 4))
    mask = np.array([True, False])
    request = pb.ModelInferRequest(model_name="m", id="q")
    request.parameters["p"].string_param = "v"
    tensors = [
        (changes.get("name", "input"), changes.get("datatype", "FP32"), x),
        ("mask", "BOOL", mask),
    ][: changes.get("count", 2)]
    for name, datatype, arr in tensors:
        entry = request.inputs.add(name=name, datatype=datatype, shape=list(arr.shape))
        if raw:
            request.raw_input_contents.append(arr.tobytes())
        else:
            field = "bool_contents" if datatype == "BOOL" else "fp32_contents"
            getattr(entry.contents, field).extend(arr.ravel().tolist())
    for output in changes.get("outputs", ["label"]):
        request.outputs.add(name=output)
    return request


def via_rest(request: pb.ModelInferRequest) -> Any:
    body = grpc_to_rest_request(request)
    return parse_infer_request(body.body, body.json_length, SIGNATURE)


@pytest.mark.parametrize("raw", [False, True])
def test_the_same_request_as_its_rest_body(raw: bool) -> None:
    got, want = grpc_infer_request(message(raw), SIGNATURE), via_rest(message(raw))
    assert (got.id, got.outputs, got.parameters, got.binary_output) == (
        want.id,
        want.outputs,
        want.parameters,
        want.binary_output,
    )
    assert list(got.inputs) == list(want.inputs)
    for name, arr in want.inputs.items():
        assert got.inputs[name].dtype == arr.dtype and np.array_equal(got.inputs[name], arr)


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize(
    "changes",
    [
        {"name": "other"},
        {"count": 1},
        {"x": np.zeros((2, 3), np.float32)},
        {"outputs": ["nope"]},
        {"x": np.zeros((0, 4), np.float32)},
    ],
)
def test_the_same_refusals_as_rest(raw: bool, changes: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as rest:
        via_rest(message(raw, **changes))
    with pytest.raises(ProtocolError) as grpc:
        grpc_infer_request(message(raw, **changes), SIGNATURE)
    assert grpc.value.message == rest.value.message


def test_datatype_and_size_mismatches_are_named() -> None:
    with pytest.raises(ProtocolError, match="datatype INT32 does not match the model's FP32"):
        grpc_infer_request(message(True, datatype="INT32"), SIGNATURE)
    with pytest.raises(ProtocolError, match="datatype INT32 does not match the model's FP32"):
        grpc_infer_request(message(False, datatype="INT32"), SIGNATURE)
    short = message(True)
    short.raw_input_contents[0] = b"\x00" * 4
    with pytest.raises(ProtocolError, match="binary_data_size 4 does not match shape"):
        grpc_infer_request(short, SIGNATURE)

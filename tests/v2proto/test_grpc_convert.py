"""REST bodies <-> gRPC messages (v2proto.grpc.convert): round trips are exact, property-tested."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from v2proto.codec import decode_infer_response, encode_infer_request, parse_infer_request
from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.contents import TYPED_FIELD
from v2proto.grpc.convert import (
    OutputForms,
    grpc_to_rest_request,
    grpc_to_rest_response,
    rest_to_grpc_request,
    rest_to_grpc_response,
)
from v2proto.signature import DATATYPES

NUMERIC = [d for d in DATATYPES if d != "BYTES"]
names = st.text("abcdefghij_", min_size=1, max_size=6)
shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)
param_values = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
params = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=5), param_values, max_size=3)


@st.composite
def arrays(draw: Any, *, json_safe: bool, utf8: bool = True) -> tuple[str, np.ndarray[Any, Any]]:
    datatype = draw(st.sampled_from([*NUMERIC, "BYTES"]))
    shape = draw(shapes)
    if datatype == "BYTES":
        items = st.text(max_size=5).map(str.encode) if utf8 else st.binary(max_size=5)
        flat = draw(st.lists(items, min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
        arr = np.empty(len(flat), dtype=object)
        arr[:] = flat
        return datatype, arr.reshape(shape)
    dtype = DATATYPES[datatype].newbyteorder("=")
    elements = None
    if dtype.kind == "f":
        widths: dict[int, Literal[16, 32, 64]] = {2: 16, 4: 32, 8: 64}
        width = widths[dtype.itemsize]
        elements = st.floats(width=width, allow_nan=not json_safe, allow_infinity=not json_safe)
    if datatype == "UINT64" and json_safe:
        # v2proto.tensors reads JSON integers through numpy's own inference: a list mixing
        # values above 2**63 with small ones comes out as floats and is refused (on REST too)
        elements = st.integers(0, 2**63 - 1)
    return datatype, draw(hnp.arrays(dtype, shape, elements=elements))


def same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> None:
    assert a.shape == b.shape
    if a.dtype == object:
        assert list(a.ravel()) == list(b.ravel())
    else:
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes()  # bit for bit (NaN, -0.0)


def grpc_request(tensors: list[tuple[str, np.ndarray[Any, Any]]], raw: bool) -> Any:
    message = pb.ModelInferRequest(model_name="m", model_version="2", id="req-1")
    for i, (datatype, arr) in enumerate(tensors):
        entry = message.inputs.add(name=f"in{i}", datatype=datatype, shape=list(arr.shape))
        if raw:
            if datatype == "BYTES":
                message.raw_input_contents.append(
                    b"".join(len(x).to_bytes(4, "little") + x for x in arr.ravel())
                )
            else:
                message.raw_input_contents.append(arr.tobytes())
        else:
            getattr(entry.contents, TYPED_FIELD[datatype]).extend(arr.ravel().tolist())
    return message


def as_outputs(request: Any, message: Any) -> None:
    for entry in request.inputs:
        out = message.outputs.add(name=entry.name, datatype=entry.datatype, shape=entry.shape)
        if entry.HasField("contents"):
            out.contents.CopyFrom(entry.contents)
    message.raw_output_contents.extend(request.raw_input_contents)


typed_tensors = st.lists(
    arrays(json_safe=True).filter(lambda t: t[0] != "FP16"), min_size=1, max_size=3
)
raw_tensors = st.lists(arrays(json_safe=False, utf8=False), min_size=1, max_size=3)


@settings(max_examples=150, deadline=None)
@given(typed_tensors, params, st.lists(names, max_size=2, unique=True))
def test_grpc_request_with_typed_contents_round_trips_through_rest_json(
    tensors: Any, request_params: Any, outputs: list[str]
) -> None:
    message = grpc_request(tensors, raw=False)
    for key, value in request_params.items():
        message.parameters[key].CopyFrom(_param(value))
    for name in outputs:
        message.outputs.add(name=name)
    body = grpc_to_rest_request(message)
    assert body.json_length is None  # typed contents travel as JSON data
    back, forms = rest_to_grpc_request(body.body, None, model_name="m", model_version="2")
    assert back == message
    assert forms == OutputForms(False, dict.fromkeys(outputs, False))


@settings(max_examples=150, deadline=None)
@given(raw_tensors)
def test_grpc_request_with_raw_contents_round_trips_through_binary_data(tensors: Any) -> None:
    message = grpc_request(tensors, raw=True)
    body = grpc_to_rest_request(message, binary_outputs=True)
    assert body.json_length is not None
    back, forms = rest_to_grpc_request(
        body.body, body.json_length, model_name="m", model_version="2"
    )
    assert back == message
    assert forms.default is True


@settings(max_examples=150, deadline=None)
@given(st.lists(arrays(json_safe=True), min_size=1, max_size=3), st.booleans(), st.booleans())
def test_rest_request_round_trips_through_grpc(
    tensors: Any, binary_inputs: bool, binary_outputs: bool
) -> None:
    inputs = {f"in{i}": arr for i, (_, arr) in enumerate(tensors)}
    inputs = {k: v for k, v in inputs.items() if v.shape[0] > 0}  # a request has rows
    if not inputs:
        return
    sent = encode_infer_request(
        inputs,
        ["out"],
        binary_inputs=binary_inputs,
        binary_outputs=binary_outputs,
        request_id="r-9",
    )
    message, forms = rest_to_grpc_request(sent.body, sent.json_length, model_name="m")
    assert message.id == "r-9"
    assert forms.binary("out") is binary_outputs
    back = grpc_to_rest_request(message, binary_outputs=binary_outputs)
    original = parse_infer_request(sent.body, sent.json_length)
    again = parse_infer_request(back.body, back.json_length)
    assert (again.id, again.outputs, again.parameters) == (
        original.id,
        original.outputs,
        original.parameters,
    )
    assert list(again.inputs) == list(original.inputs)
    for name, arr in original.inputs.items():
        same(again.inputs[name], arr)


@settings(max_examples=150, deadline=None)
@given(st.one_of(typed_tensors.map(lambda t: (t, False)), raw_tensors.map(lambda t: (t, True))))
def test_grpc_response_round_trips_through_rest(case: Any) -> None:
    tensors, raw = case
    request = grpc_request(tensors, raw)
    message = pb.ModelInferResponse(model_name="m", id="a", parameters=request.parameters)
    message.parameters["vote"].string_param = "2/3"
    as_outputs(request, message)
    body = grpc_to_rest_response(message)
    assert rest_to_grpc_response(body.body, body.json_length) == message
    decoded = decode_infer_response(body.body, body.json_length)
    assert decoded.parameters == {"vote": "2/3"}


@settings(max_examples=100, deadline=None)
@given(raw_tensors, st.booleans())
def test_raw_response_answers_a_rest_client_in_the_form_it_asked(
    tensors: Any, binary: bool
) -> None:
    if not binary:  # what JSON cannot carry, only binary data can:
        for _, arr in tensors:
            assume(not (arr.dtype.kind == "f" and not np.isfinite(arr).all()))  # NaN, infinity
            # v2proto.tensors reads JSON integers above 2**63 mixed with small ones as floats
            assume(not (arr.dtype == np.uint64 and arr.size and arr.max() >= 2**63))
    request = grpc_request(tensors, raw=True)
    message = pb.ModelInferResponse(model_name="m", id="a")
    as_outputs(request, message)
    body = grpc_to_rest_response(message, OutputForms(default=binary))
    decoded = decode_infer_response(body.body, body.json_length)
    for (datatype, arr), entry in zip(tensors, message.outputs, strict=True):
        got = decoded.outputs[entry.name]
        if datatype == "FP16" and not binary:
            got = got.astype(np.float16)  # JSON data of FP16 is read back as numbers
        same(got, arr)


def test_fp16_or_binary_or_non_utf8_bytes_make_every_tensor_raw() -> None:
    half = encode_infer_request({"a": np.ones((1, 2), np.float16), "b": np.ones((1,), np.int32)})
    message, _ = rest_to_grpc_request(half.body, None, model_name="m")
    assert len(message.raw_input_contents) == 2
    assert not message.inputs[1].HasField("contents")
    odd = pb.ModelInferRequest(model_name="m")
    odd.inputs.add(name="s", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"\xff")
    body = grpc_to_rest_request(odd)
    assert body.json_length is not None  # not JSON text: sent as binary data
    back, _ = rest_to_grpc_request(body.body, body.json_length, model_name="m")
    assert list(back.raw_input_contents) == [b"\x01\x00\x00\x00\xff"]


def test_the_gateways_parameters_and_ids_cross_both_ways() -> None:
    rest = orjson.dumps(
        {
            "model_name": "digits",
            "model_version": "1",
            "id": "abc",
            "parameters": {"degraded": "no_quorum", "served_by": "fallback/tiny", "n": 3},
            "outputs": [{"name": "label", "datatype": "INT64", "shape": [2], "data": [1, 2]}],
        }
    )
    message = rest_to_grpc_response(rest, None)
    assert message.parameters["degraded"].string_param == "no_quorum"
    assert message.parameters["n"].int64_param == 3
    assert list(message.outputs[0].contents.int64_contents) == [1, 2]
    assert orjson.loads(grpc_to_rest_response(message).body) == orjson.loads(rest)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m.raw_input_contents.append(b"\x00" * 3), "raw contents of 3 bytes"),
        (lambda m: m.inputs[0].contents.fp32_contents.append(1.0), "has 3 elements"),
        (lambda m: setattr(m.inputs[0], "datatype", "FP8"), "unknown datatype"),
    ],
)
def test_malformed_messages_are_refused_naming_the_field(mutate: Any, message: str) -> None:
    request = pb.ModelInferRequest(model_name="m")
    entry = request.inputs.add(name="x", datatype="FP32", shape=[2])
    if "raw" not in message:
        entry.contents.fp32_contents.extend([1.0, 2.0])
    mutate(request)
    with pytest.raises(ProtocolError, match=message):
        grpc_to_rest_request(request)


def test_a_parameter_grpc_cannot_carry_is_refused() -> None:
    body = orjson.dumps(
        {
            "parameters": {"nested": {"a": 1}},
            "inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}],
        }
    )
    with pytest.raises(ProtocolError, match=r"parameters\.nested"):
        rest_to_grpc_request(body, None, model_name="m")


def _param(value: Any) -> pb.InferParameter:
    if isinstance(value, bool):
        return pb.InferParameter(bool_param=value)
    if isinstance(value, int):
        if value < 2**63:
            return pb.InferParameter(int64_param=value)
        return pb.InferParameter(uint64_param=value)
    if isinstance(value, float):
        return pb.InferParameter(double_param=value)
    return pb.InferParameter(string_param=value)


def test_a_servers_rest_form_flags_in_grpc_tensor_parameters_are_dropped() -> None:
    """KServe 0.21 answers raw contents and tags each output with binary_data_size."""
    message = pb.ModelInferResponse(model_name="m", id="q")
    out = message.outputs.add(name="predict", datatype="INT64", shape=[2])
    out.parameters["binary_data_size"].int64_param = 16
    message.raw_output_contents.append(np.array([2, 0], np.int64).tobytes())
    body = grpc_to_rest_response(message, OutputForms())
    assert orjson.loads(body.body)["outputs"] == [
        {"name": "predict", "datatype": "INT64", "shape": [2], "data": [2, 0]}
    ]

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from v2proto.codec import (
    BINARY_CONTENT_TYPE,
    HEADER_LENGTH,
    JSON_CONTENT_TYPE,
    decode_infer_response,
    encode_infer_request,
    encode_infer_response,
    parse_infer_request,
)
from v2proto.errors import ProtocolError
from v2proto.outputs import RequestedOutput
from v2proto.signature import Signature, TensorSpec

SIGNATURE = Signature(
    inputs=(TensorSpec("input", "FP32", (-1, 4)),),
    outputs=(TensorSpec("label", "INT64", (-1,)), TensorSpec("probabilities", "FP32", (-1, 3))),
)
ROW = [1.0, 2.0, 3.0, 4.0]


def body(**doc: Any) -> bytes:
    return orjson.dumps(doc)


def one_input(**fields: Any) -> bytes:
    tensor = {"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW, **fields}
    return body(inputs=[{k: v for k, v in tensor.items() if v is not None}])


def parse(raw: bytes, header_length: int | None = None) -> Any:
    return parse_infer_request(raw, header_length, SIGNATURE)


def error_of(raw: bytes, header_length: int | None = None) -> str:
    with pytest.raises(ProtocolError) as info:
        parse(raw, header_length)
    return info.value.message


# ----------------------------------------------------------------------------- valid requests


def test_flat_and_nested_data_give_the_same_array() -> None:
    flat = parse(
        body(inputs=[{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": ROW + ROW}])
    )
    nested = parse(
        body(inputs=[{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": [ROW, ROW]}])
    )
    for request in (flat, nested):
        arr = request.inputs["input"]
        assert arr.dtype == np.float32 and arr.shape == (2, 4)
        assert request.rows == 2
    np.testing.assert_array_equal(flat.inputs["input"], nested.inputs["input"])


def test_integers_are_accepted_for_float_inputs() -> None:
    request = parse(one_input(data=[1, 2, 3, 4]))
    assert request.inputs["input"].dtype == np.float32


def test_id_parameters_and_requested_outputs() -> None:
    request = parse(
        body(
            id="req-7",
            parameters={"binary_data_output": True},
            inputs=[{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}],
            outputs=[
                {"name": "label"},
                {"name": "probabilities", "parameters": {"binary_data": False}},
            ],
        )
    )
    assert request.id == "req-7"
    assert request.requested(SIGNATURE.output_names) == (
        RequestedOutput("label", True),
        RequestedOutput("probabilities", False),
    )


def test_all_outputs_when_none_requested() -> None:
    request = parse(one_input())
    assert request.outputs is None
    assert request.requested(SIGNATURE.output_names) == (
        RequestedOutput("label", False),
        RequestedOutput("probabilities", False),
    )


def test_binary_input() -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [2, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ]
        }
    )
    request = parse(head + x.tobytes(), len(head))
    np.testing.assert_array_equal(request.inputs["input"], x)


def test_header_length_may_be_a_string() -> None:
    encoded = encode_infer_request({"input": np.ones((1, 4), np.float32)}, binary_inputs=True)
    request = parse_infer_request(encoded.body, str(encoded.json_length), SIGNATURE)
    assert request.inputs["input"].shape == (1, 4)


@pytest.mark.parametrize("binary_data", [True, False])
def test_parses_what_tritonclient_sends(binary_data: bool) -> None:
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    infer_input = httpclient.InferInput("input", [2, 4], "FP32")
    infer_input.set_data_from_numpy(x, binary_data=binary_data)
    outputs = [httpclient.InferRequestedOutput("label", binary_data=True)]
    raw, json_size = httpclient.InferenceServerClient.generate_request_body(
        [infer_input], outputs=outputs, request_id="t1"
    )
    request = parse(raw, json_size)
    np.testing.assert_array_equal(request.inputs["input"], x)
    assert request.id == "t1"
    assert request.outputs == (RequestedOutput("label", True),)


def test_parses_tritonclient_default_binary_output_request() -> None:
    infer_input = httpclient.InferInput("input", [1, 4], "FP32")
    infer_input.set_data_from_numpy(np.ones((1, 4), np.float32), binary_data=False)
    raw, json_size = httpclient.InferenceServerClient.generate_request_body([infer_input])
    request = parse(raw, json_size)
    assert request.binary_output is True
    assert all(o.binary for o in request.requested(SIGNATURE.output_names))


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"{not json", "malformed JSON"),
        (b"", "malformed JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (body(outputs=[]), "missing 'inputs'"),
        (body(inputs=[]), "'inputs' must be a non-empty list"),
        (body(inputs={"name": "input"}), "'inputs' must be a non-empty list"),
        (body(inputs=[3]), "inputs[0] must be an object"),
        (body(inputs=[{"shape": [1, 4]}]), "inputs[0]: 'name' must be a non-empty string"),
        (body(id=5, inputs=[]), "'id' must be a string"),
        (body(parameters=[1], inputs=[]), "parameters must be an object"),
        (
            body(parameters={"binary_data_output": "yes"}, inputs=[]),
            "parameters.binary_data_output must be true or false",
        ),
    ],
)
def test_request_level_errors(raw: bytes, expected: str) -> None:
    assert expected in error_of(raw)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"name": "pixels"}, "unknown input 'pixels'; the model's inputs are: input"),
        ({"datatype": "FP64"}, "input 'input': datatype FP64 does not match the model's FP32"),
        ({"datatype": "FLOAT"}, "input 'input': unknown datatype 'FLOAT'"),
        ({"shape": [4]}, "input 'input': shape [4] has rank 1, the model expects rank 2 [-1, 4]"),
        ({"shape": [1, 5]}, "does not match the model's [-1, 4] (dimension 1 must be 4)"),
        ({"shape": [1, -4]}, "'shape' must be a list of non-negative integers"),
        ({"shape": "1x4"}, "'shape' must be a list of non-negative integers"),
        ({"shape": [1.0, 4]}, "'shape' must be a list of non-negative integers"),
        ({"shape": [0, 4], "data": []}, "input 'input': batch of 0 rows"),
        ({"data": ROW[:3]}, "input 'input': 'data' has 3 elements, shape [1, 4] needs 4"),
        ({"data": ROW + ROW}, "'data' has 8 elements, shape [1, 4] needs 4"),
        ({"data": ["a", "b", "c", "d"]}, "'data' must hold only numbers for FP32, found strings"),
        ({"data": [1, None, 3, 4]}, "'data' must hold only numbers for FP32, found non-numeric"),
        ({"data": [True, False, True, True]}, "must hold only numbers for FP32, found booleans"),
        ({"data": [[1, 2], [3]]}, "'data' is ragged"),
        ({"data": 1.0}, "input 'input': 'data' must be a list"),
        ({"data": None}, "input 'input': missing 'data' (or parameters.binary_data_size)"),
        ({"parameters": "x"}, "input 'input' parameters must be an object"),
        ({"parameters": {"binary_data_size": 16}}, "has both 'data' and binary_data_size"),
    ],
)
def test_input_errors_name_the_problem(fields: dict[str, Any], expected: str) -> None:
    assert expected in error_of(one_input(**fields))


def test_missing_required_input() -> None:
    sig = Signature(
        inputs=(TensorSpec("a", "FP32", (-1, 4)), TensorSpec("b", "FP32", (-1, 4))),
        outputs=SIGNATURE.outputs,
    )
    raw = body(inputs=[{"name": "a", "shape": [1, 4], "datatype": "FP32", "data": ROW}])
    with pytest.raises(ProtocolError, match="missing input 'b'"):
        parse_infer_request(raw, None, sig)


def test_duplicate_input() -> None:
    tensor = {"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}
    assert "input 'input' appears twice" in error_of(body(inputs=[tensor, tensor]))


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        (
            [{"name": "score"}],
            "unknown output 'score'; the model's outputs are: label, probabilities",
        ),
        ({"name": "label"}, "'outputs' must be a list"),
        (["label"], "outputs[0] must be an object"),
        (
            [{"name": "label", "parameters": {"binary_data": 1}}],
            "output 'label' parameters.binary_data must be true or false",
        ),
    ],
)
def test_output_errors(outputs: Any, expected: str) -> None:
    raw = body(
        inputs=[{"name": "input", "shape": [1, 4], "datatype": "FP32", "data": ROW}],
        outputs=outputs,
    )
    assert expected in error_of(raw)


def binary_request(size: int, payload: bytes) -> tuple[bytes, int]:
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 4],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": size},
                }
            ]
        }
    )
    return head + payload, len(head)


@pytest.mark.parametrize(
    ("size", "payload", "expected"),
    [
        (12, bytes(12), "binary_data_size 12 does not match shape [1, 4] of FP32 (16 bytes)"),
        (16, bytes(8), "binary_data_size 16 exceeds the 8 bytes left"),
        (16, bytes(20), "4 bytes of binary data follow the JSON; no tensor claims them"),
        (-1, bytes(16), "binary_data_size must be a non-negative integer"),
    ],
)
def test_binary_errors(size: int, payload: bytes, expected: str) -> None:
    raw, header_length = binary_request(size, payload)
    assert expected in error_of(raw, header_length)


def test_binary_size_without_header() -> None:
    raw, _ = binary_request(16, b"")
    assert "no Inference-Header-Content-Length header" in error_of(raw)
    raw, _ = binary_request(16, bytes(16))
    assert "needs an Inference-Header-Content-Length header" in error_of(raw)


@pytest.mark.parametrize("header_length", [-1, 10_000, "abc"])
def test_bad_header_length(header_length: Any) -> None:
    message = error_of(one_input(), header_length)
    assert "Inference-Header-Content-Length" in message


def test_integer_datatypes_reject_floats_and_out_of_range() -> None:
    sig = Signature(inputs=(TensorSpec("x", "UINT8", (-1,)),), outputs=())

    def err(data: list[Any]) -> str:
        raw = body(inputs=[{"name": "x", "shape": [len(data)], "datatype": "UINT8", "data": data}])
        with pytest.raises(ProtocolError) as info:
            parse_infer_request(raw, None, sig)
        return info.value.message

    assert "must hold only integers for UINT8, found non-integers" in err([1.5, 2])
    assert "out of range for UINT8" in err([1, 300])
    ok = body(inputs=[{"name": "x", "shape": [2], "datatype": "UINT8", "data": [0, 255]}])
    assert parse_infer_request(ok, None, sig).inputs["x"].dtype == np.uint8


def test_without_signature_any_tensor_is_accepted() -> None:
    raw = body(
        inputs=[
            {"name": "anything", "shape": [2], "datatype": "BOOL", "data": [True, False]},
            {"name": "s", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
        ]
    )
    request = parse_infer_request(raw)
    assert request.inputs["anything"].tolist() == [True, False]
    assert request.inputs["s"].tolist() == [b"hi"]


# ----------------------------------------------------------------------------- responses


def outputs_fixture() -> dict[str, np.ndarray[Any, Any]]:
    return {
        "label": np.array([2, 0], dtype=np.int64),
        "probabilities": np.array([[0.1, 0.2, 0.7], [0.8, 0.1, 0.1]], dtype=np.float32),
    }


def test_json_response() -> None:
    outs = outputs_fixture()
    encoded = encode_infer_response(
        "m", "1", [(k, v, False) for k, v in outs.items()], request_id="r1"
    )
    assert encoded.json_length is None and encoded.content_type == JSON_CONTENT_TYPE
    doc = orjson.loads(encoded.body)
    assert doc["model_name"] == "m" and doc["model_version"] == "1" and doc["id"] == "r1"
    assert doc["outputs"][0] == {"name": "label", "datatype": "INT64", "shape": [2], "data": [2, 0]}
    assert doc["outputs"][1]["datatype"] == "FP32" and doc["outputs"][1]["shape"] == [2, 3]
    assert len(doc["outputs"][1]["data"]) == 6
    decoded = decode_infer_response(encoded.body)
    np.testing.assert_array_equal(decoded.outputs["probabilities"], outs["probabilities"])


def test_binary_response_round_trip() -> None:
    outs = outputs_fixture()
    encoded = encode_infer_response(
        "m", "1", [("label", outs["label"], True), ("probabilities", outs["probabilities"], False)]
    )
    assert encoded.content_type == BINARY_CONTENT_TYPE
    assert encoded.headers()[HEADER_LENGTH] == str(encoded.json_length)
    head = orjson.loads(encoded.body[: encoded.json_length])
    assert head["outputs"][0]["parameters"] == {"binary_data_size": 16}
    assert "data" not in head["outputs"][0]
    decoded = decode_infer_response(encoded.body, encoded.json_length)
    assert decoded.model_name == "m" and decoded.id is None
    for name, arr in outs.items():
        np.testing.assert_array_equal(decoded.outputs[name], arr)
        assert decoded.outputs[name].dtype == arr.dtype


def test_tritonclient_decodes_our_binary_response() -> None:
    outs = outputs_fixture()
    encoded = encode_infer_response("m", "1", [(k, v, True) for k, v in outs.items()])
    result = httpclient.InferResult.from_response_body(encoded.body, False, encoded.json_length)
    for name, arr in outs.items():
        np.testing.assert_array_equal(result.as_numpy(name), arr)


@pytest.mark.parametrize(
    "arr",
    [
        np.array([[True, False]]),
        np.arange(6, dtype=np.uint8).reshape(2, 3),
        np.arange(3, dtype=np.int32),
        np.array([1.5, -2.25], dtype=np.float16),
        np.array([1.5, -2.25], dtype=np.float64),
        np.array([b"ab", b""], dtype=object),
    ],
)
@pytest.mark.parametrize("binary", [True, False])
def test_every_datatype_round_trips(arr: np.ndarray[Any, Any], binary: bool) -> None:
    request = encode_infer_request({"x": arr}, ["x"], binary_inputs=binary, binary_outputs=binary)
    parsed = parse_infer_request(request.body, request.json_length)
    np.testing.assert_array_equal(parsed.inputs["x"], arr)
    assert parsed.outputs == (RequestedOutput("x", binary),)
    response = encode_infer_response("m", None, [("x", parsed.inputs["x"], binary)])
    decoded = decode_infer_response(response.body, response.json_length)
    np.testing.assert_array_equal(decoded.outputs["x"], arr)
    assert decoded.model_version is None


def test_decode_rejects_malformed_responses() -> None:
    with pytest.raises(ProtocolError, match="no string 'model_name'"):
        decode_infer_response(b'{"outputs": []}')
    with pytest.raises(ProtocolError, match="no 'outputs' list"):
        decode_infer_response(b'{"model_name": "m"}')
    with pytest.raises(ProtocolError, match="truncated BYTES element length"):
        head = orjson.dumps(
            {
                "model_name": "m",
                "outputs": [
                    {
                        "name": "s",
                        "shape": [1],
                        "datatype": "BYTES",
                        "parameters": {"binary_data_size": 2},
                    }
                ],
            }
        )
        decode_infer_response(head + b"\x01\x00", len(head))


def test_nonfinite_output_names_the_first_float_output_with_nan_or_infinity() -> None:
    from v2proto.tensors import nonfinite_output

    label = np.array([3], dtype=np.int64)
    fine = np.array([[0.1, 0.9]], dtype=np.float32)
    assert nonfinite_output({"label": label, "probabilities": fine}) is None
    for bad in (np.nan, np.inf, -np.inf):
        broken = fine.copy()
        broken[0, 1] = bad
        assert nonfinite_output({"label": label, "probabilities": broken}) == "probabilities"


def test_a_response_decodes_only_the_outputs_asked_for() -> None:
    """The others are passed over: their binary bytes skipped, their data never converted (a
    vote compares only its outputs: garbage in another one is not its business)."""
    labels = np.array([3, 1], dtype=np.int64).tobytes()
    header = orjson.dumps(
        {
            "model_name": "m",
            "outputs": [
                {"name": "scores", "datatype": "FP32", "shape": [2], "data": ["not", "numbers"]},
                {
                    "name": "raw",
                    "datatype": "FP32",
                    "shape": [1],
                    "parameters": {"binary_data_size": 4},
                },
                {
                    "name": "label",
                    "datatype": "INT64",
                    "shape": [2],
                    "parameters": {"binary_data_size": 16},
                },
            ],
        }
    )
    body = header + b"\x00\x00\x80\x3f" + labels
    only = decode_infer_response(body, len(header), only=("label",))
    assert list(only.outputs) == ["label"] and only.outputs["label"].tolist() == [3, 1]
    with pytest.raises(ProtocolError, match="scores"):
        decode_infer_response(body, len(header))
    with pytest.raises(ProtocolError, match="bytes of binary data follow"):
        decode_infer_response(body + b"x", len(header), only=("label",))  # still all accounted

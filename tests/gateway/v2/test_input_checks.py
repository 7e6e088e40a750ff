"""The gateway's input checks: parameters, the row limit, finite numbers; detached requests."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest

from gateway.api.parse_process import parse_detached
from gateway.errors import BadRequest
from gateway.v2.body import Body
from gateway.v2.outputs import asking_for
from gateway.v2.request import InferRequestInfo, detached, parse_infer_request


def ask(
    info: InferRequestInfo, body: bytes, names: list[str] | None
) -> tuple[InferRequestInfo, bytes, str | None]:
    """`asking_for` on ``body`` received in one buffer, its new body joined."""
    asked, new, length = asking_for(info, Body.of(body), names)
    return asked, new.joined(), length


ROW = [0.5] * 64


def request(data: Any = None, shape: list[int] | None = None, **extra: Any) -> dict[str, Any]:
    tensor = {
        "name": "input",
        "shape": shape or [1, 64],
        "datatype": "FP32",
        "data": ROW if data is None else data,
    }
    return {"inputs": [tensor], **extra}


def parse(doc: dict[str, Any], max_rows: int | None = None) -> Any:
    return parse_infer_request(orjson.dumps(doc), None, max_rows)


def binary(values: np.ndarray, datatype: str = "FP32", **extra: Any) -> tuple[bytes, str]:
    raw = values.tobytes()
    tensor = {
        "name": "input",
        "shape": list(values.shape),
        "datatype": datatype,
        "parameters": {"binary_data_size": len(raw)},
    }
    head = orjson.dumps({"inputs": [tensor], **extra})
    return head + raw, str(len(head))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (request(parameters="abc"), "'parameters' must be an object, not str"),
        (request(parameters=[["binary_data_output", True]]), "'parameters' must be an object"),
        (request(parameters={"binary_data_output": "yes"}), "binary_data_output must be true or"),
        (request(outputs=[{"name": "label", "parameters": 5}]), "outputs[0].parameters must be"),
        (request(outputs=[{"name": "o", "parameters": {"binary_data": 1}}]), "binary_data must"),
        (
            {
                "inputs": [
                    {
                        "name": "input",
                        "shape": [1, 64],
                        "datatype": "FP32",
                        "data": ROW,
                        "parameters": "x",
                    }
                ]
            },
            "input 'input': 'parameters' must be an object",
        ),
    ],
)
def test_parameters_that_are_not_objects_are_a_400_naming_them(
    doc: dict[str, Any], message: str
) -> None:
    with pytest.raises(BadRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(doc)


def test_rows_over_the_models_limit_are_a_400_naming_the_limit() -> None:
    parse(request([ROW] * 8, [8, 64]), max_rows=8)
    with pytest.raises(BadRequest, match="9 rows; this model takes at most 8 rows a request"):
        parse(request([ROW] * 9, [9, 64]), max_rows=8)


@pytest.mark.parametrize(
    ("data", "datatype"),
    [
        ([*ROW[:63], 1e39], "FP32"),
        ([*ROW[:63], -3.5e38], "FP32"),
        ([ROW, [*ROW[:63], 1e39]], "FP32"),  # nested rows
        ([*ROW[:63], 70000.0], "FP16"),
    ],
)
def test_json_numbers_that_overflow_the_datatype_are_a_400(data: Any, datatype: str) -> None:
    doc = request(data, [len(data), 64] if isinstance(data[0], list) else [1, 64])
    doc["inputs"][0]["datatype"] = datatype
    with pytest.raises(BadRequest, match=f"outside the {datatype} range"):
        parse(doc)


@pytest.mark.parametrize(
    ("data", "datatype"),
    [
        ([*ROW[:63], 3.4e38], "FP32"),  # the largest FP32 values are fine
        ([ROW, ROW], "FP32"),
        ([*ROW[:63], 1e300], "FP64"),
        ([*ROW[:63], 65504.0], "FP16"),
        ([1] * 64, "INT64"),
    ],
)
def test_finite_numbers_pass(data: Any, datatype: str) -> None:
    doc = request(data, [len(data), 64] if isinstance(data[0], list) else [1, 64])
    doc["inputs"][0]["datatype"] = datatype
    parse(doc)


def test_orjson_already_refuses_nan_and_infinity_literals() -> None:
    body = orjson.dumps(request()).replace(b"0.5]", b"NaN]")
    with pytest.raises(BadRequest, match="not valid JSON"):
        parse_infer_request(body, None)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["FP32", "FP64", "FP16"])
def test_binary_nan_or_infinity_is_a_400(bad: float, dtype: str) -> None:
    numpy_type = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16}[dtype]
    values = np.full((2, 64), 0.25, dtype=numpy_type)
    parse_infer_request(*binary(values, dtype))
    values[1, 7] = bad
    with pytest.raises(BadRequest, match=f"binary {dtype} data holds NaN or infinity"):
        parse_infer_request(*binary(values, dtype))


def test_binary_sizes_are_still_checked_against_the_body() -> None:
    body, length = binary(np.zeros((1, 64), dtype=np.float32))
    with pytest.raises(BadRequest, match="binary tensor data is 260 bytes but inputs declare 256"):
        parse_infer_request(body + struct.pack("<f", 1.0), length)


def test_a_detached_request_keeps_everything_but_the_data() -> None:
    body = orjson.dumps(request(id="a", outputs=[{"name": "label"}]))
    info = parse_detached(body, None, 10)
    assert info.id == "a" and info.header["outputs"] == [{"name": "label"}]
    assert info.header["inputs"] == [{"name": "input", "shape": [1, 64], "datatype": "FP32"}]
    assert detached(info.header) and not detached(parse_infer_request(body, None).header)
    raw, length = binary(np.zeros((1, 64), dtype=np.float32))
    assert not detached(parse_detached(raw, length, 10).header)  # binary data stays in the body


def test_asking_for_json_outputs_keeps_a_body_that_asks_for_json_already() -> None:
    body = orjson.dumps(request())
    assert ask(parse_detached(body, None, None), body, None)[1:] == (body, None)


def test_asking_for_json_outputs_rebuilds_a_detached_request_from_its_body() -> None:
    doc = request(
        parameters={"binary_data_output": True, "x": 1},
        outputs=[{"name": "label", "parameters": {"binary_data": True}}],
    )
    body = orjson.dumps(doc)
    for info in (parse_infer_request(body, None), parse_detached(body, None, None)):
        _, new_body, length = ask(info, body, None)
        assert length is None
        assert orjson.loads(new_body) == {
            **request(),
            "parameters": {"x": 1},
            "outputs": [{"name": "label"}],
        }
    raw, head_length = binary(
        np.ones((1, 64), dtype=np.float32), parameters={"binary_data_output": True}
    )
    _, new_body, length = ask(parse_detached(raw, head_length, None), raw, None)
    assert length is not None and new_body.endswith(np.ones(64, dtype=np.float32).tobytes())
    assert "parameters" not in orjson.loads(new_body[: int(length)])

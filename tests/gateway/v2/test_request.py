from __future__ import annotations

import orjson
import pytest

from gateway.errors import BadRequest
from gateway.v2.request import parse_infer_request

ROW = [0.0] * 64


def _body(**fields: object) -> bytes:
    request = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": ROW}]}
    request.update(fields)  # type: ignore[arg-type]
    return orjson.dumps(request)


def test_plain_json_request() -> None:
    info = parse_infer_request(_body(id="42"), None)
    assert info.id == "42" and info.binary_length == 0


def test_tritonclient_parameters_are_accepted() -> None:
    body = _body(
        parameters={"binary_data_output": True},
        outputs=[{"name": "label", "parameters": {"binary_data": False}}],
    )
    parse_infer_request(body, None)


def test_binary_inputs() -> None:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 64],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 256},
                }
            ]
        }
    )
    info = parse_infer_request(header + bytes(256), str(len(header)))
    assert info.binary_length == 256


@pytest.mark.parametrize(
    ("body", "header_length", "message"),
    [
        (b"", None, "empty"),
        (b"{nope", None, "not valid JSON"),
        (b"[1]", None, "JSON object"),
        (b"{}", None, "'inputs' must be a non-empty list"),
        (b'{"inputs": [1]}', None, r"inputs\[0\] must be an object"),
        (b'{"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}', None, "name"),
        (b'{"inputs": [{"name": "x", "shape": [1], "data": [1]}]}', None, "'datatype'"),
        (
            b'{"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32", "data": [1]}]}',
            None,
            "'shape'",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}',
            None,
            "'data' is missing",
        ),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": 3}]}',
            None,
            "'data' must be a list",
        ),
        (b'{"id": 5, "inputs": []}', None, "'id' must be a string"),
        (_body(outputs=[{"nam": "x"}]), None, r"outputs\[0\]\.name"),
        (_body(), "abc", "must be an integer"),
        (_body(), "99999", "does not fit"),
        (_body() + b"xx", str(len(_body())), "binary tensor data is 2 bytes"),
    ],
)
def test_bad_requests_name_the_problem(
    body: bytes, header_length: str | None, message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        parse_infer_request(body, header_length)

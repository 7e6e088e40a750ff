"""What every V2 server refuses is refused at the edge: no rows, an input or output named twice.

Each form of the request the edge checks goes through the same checks: a small JSON body (the
full parse), a large one (the fast path, `gateway.v2.json_fast`, which never decodes the
numbers) and a binary one (its JSON header alone). Each refusal is a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import BadRequest
from gateway.v2.request import FAST_JSON_MIN_BYTES, check_infer_request, parse_infer_request

ROWS_FOR_FAST = FAST_JSON_MIN_BYTES // (64 * 4) + 1  # rows of "0.0," enough for the fast path


def tensor(name: str = "input", rows: int = 1) -> dict[str, Any]:
    return {"name": name, "shape": [rows, 64], "datatype": "FP32", "data": [0.5] * (64 * rows)}


def binary(name: str = "input", rows: int = 1) -> dict[str, Any]:
    size = rows * 64 * 4
    return {
        "name": name,
        "shape": [rows, 64],
        "datatype": "FP32",
        "parameters": {"binary_data_size": size},
    }


def refusal(body: bytes, header_length: str | None = None) -> str:
    with pytest.raises(BadRequest) as refused:
        check_infer_request(body, header_length)
    assert refused.value.status == 400
    return refused.value.message


@pytest.mark.parametrize("rows", [1, ROWS_FOR_FAST])
def test_a_request_naming_an_input_twice_is_refused_naming_it(rows: int) -> None:
    body = orjson.dumps({"inputs": [tensor("input", rows), tensor("input", rows)]})
    assert (len(body) >= FAST_JSON_MIN_BYTES) == (rows > 1)  # both paths are taken
    assert refusal(body) == "inputs[1].name: input 'input' is named more than once"


def test_a_binary_request_naming_an_input_twice_is_refused_naming_it() -> None:
    header = orjson.dumps({"inputs": [binary("a"), binary("b"), binary("a")]})
    body = header + bytes(3 * 256)
    assert refusal(body, str(len(header))) == "inputs[2].name: input 'a' is named more than once"


@pytest.mark.parametrize("rows", [1, ROWS_FOR_FAST])
def test_a_request_asking_for_an_output_twice_is_refused_naming_it(rows: int) -> None:
    outputs = [{"name": "label"}, {"name": "probabilities"}, {"name": "label"}]
    body = orjson.dumps({"inputs": [tensor(rows=rows)], "outputs": outputs})
    assert refusal(body) == "outputs[2].name: output 'label' is named more than once"


def test_a_binary_request_asking_for_an_output_twice_is_refused() -> None:
    outputs = [{"name": "label", "parameters": {"binary_data": True}}, {"name": "label"}]
    header = orjson.dumps({"inputs": [binary()], "outputs": outputs})
    message = refusal(header + bytes(256), str(len(header)))
    assert message == "outputs[1].name: output 'label' is named more than once"


@pytest.mark.parametrize(
    "body, header_length",
    [
        (orjson.dumps({"inputs": [{**tensor(), "shape": [0, 64], "data": []}]}), None),
        (orjson.dumps({"inputs": [tensor(), {**tensor("mask"), "shape": [0], "data": []}]}), None),
        (orjson.dumps({"inputs": [{**binary(rows=0)}]}), "header"),
    ],
)
def test_a_batch_of_no_rows_is_refused_naming_the_input(
    body: bytes, header_length: str | None
) -> None:
    message = refusal(body, str(len(body)) if header_length else None)
    assert "has no rows; send at least one" in message
    assert message.startswith("input 'input'") or message.startswith("input 'mask'")


def test_distinct_names_and_rows_pass_every_path() -> None:
    small = orjson.dumps(
        {
            "inputs": [tensor("a"), tensor("b")],
            "outputs": [{"name": "label"}, {"name": "probabilities"}],
        }
    )
    assert parse_infer_request(small, None).header["inputs"][1]["name"] == "b"
    large = orjson.dumps({"inputs": [tensor("a", ROWS_FOR_FAST), tensor("b", ROWS_FOR_FAST)]})
    assert len(check_infer_request(large, None).header["inputs"]) == 2
    scalar = orjson.dumps({"inputs": [{"name": "x", "shape": [], "datatype": "FP32", "data": [1]}]})
    assert parse_infer_request(scalar, None).header["inputs"][0]["shape"] == []

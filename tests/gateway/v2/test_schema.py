"""Requests checked against the model's signature, on the JSON header alone."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.errors import BadRequest
from gateway.v2.schema import ModelSchema

METADATA = {
    "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "label"}, {"name": "probabilities"}],
}
SCHEMA = ModelSchema.from_metadata(METADATA)


def _header(**tensor: Any) -> dict[str, Any]:
    base = {"name": "input", "datatype": "FP32", "shape": [2, 64], "data": [0.0] * 128}
    return {"inputs": [{**base, **tensor}]}


def test_a_request_that_fits_passes() -> None:
    assert SCHEMA is not None
    SCHEMA.check(_header())
    SCHEMA.check(_header(shape=[1, 64], data=[[0.0] * 64]))  # nested rows
    SCHEMA.check(_header(data=None, parameters={"binary_data_size": 2 * 64 * 4}))
    SCHEMA.check({**_header(), "outputs": [{"name": "label"}]})


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (_header(name="pixels"), "unknown input 'pixels'; the model's inputs: input"),
        (_header(datatype="FP64"), "datatype FP64, the model takes FP32"),
        (_header(shape=[2, 63], data=[0.0] * 126), "shape [2, 63], the model takes [-1, 64]"),
        (_header(shape=[128]), "shape [128], the model takes [-1, 64]"),
        (_header(data=[0.0] * 127), "'data' has 127 elements, shape [2, 64] needs 128"),
        (
            _header(data=None, parameters={"binary_data_size": 100}),
            "100 bytes of binary data, shape [2, 64] of FP32 needs 512",
        ),
        ({**_header(), "outputs": [{"name": "predict"}]}, "unknown output 'predict'"),
        ({"inputs": []}, "missing input 'input'"),
    ],
)
def test_what_does_not_fit_is_named(header: dict[str, Any], message: str) -> None:
    assert SCHEMA is not None
    with pytest.raises(BadRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        SCHEMA.check(header)


def test_metadata_without_inputs_checks_nothing() -> None:
    assert ModelSchema.from_metadata({"inputs": [], "outputs": []}) is None
    loose = ModelSchema.from_metadata({"inputs": [{"name": "x"}]})  # no datatype, no shape
    assert loose is not None and loose.outputs is None
    loose.check({"inputs": [{"name": "x", "datatype": "INT8", "shape": [3], "data": [1, 2, 3]}]})

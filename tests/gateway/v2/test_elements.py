"""Every JSON element must fit the datatype and shape its request declares (a 400 naming the
input), so a server that would answer a misfit with a 500 never sees one."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import BadRequest
from gateway.v2.elements import check_json_data
from gateway.v2.request import parse_infer_request


def parse(data: Any, datatype: str = "FP32", shape: list[int] | None = None) -> None:
    tensor = {
        "name": "x",
        "datatype": datatype,
        "shape": [1, 2] if shape is None else shape,
        "data": data,
    }
    parse_infer_request(orjson.dumps({"inputs": [tensor]}), None)


@pytest.mark.parametrize(
    ("data", "datatype", "shape", "message"),
    [
        ([1.0, "2.0"], "FP32", None, "element 1 is a string ('2.0'); FP32 takes numbers"),
        ([True, 1.0], "FP32", None, "element 0 is a boolean (True); FP32 takes numbers"),
        ([1.0, None], "FP64", None, "element 1 is null (None); FP64 takes numbers"),
        ([1.0, {"v": 1}], "FP16", None, "element 1 is an object"),
        ([1, 2.5], "INT64", None, "element 1 is a decimal number (2.5); INT64 takes integers"),
        ([1, 2.0], "INT32", None, "element 1 is a decimal number (2.0)"),
        ([1, True], "INT8", None, "element 1 is a boolean"),
        ([1, 128], "INT8", None, "128 is outside the INT8 range [-128, 127]"),
        ([-129, 0], "INT8", None, "-129 is outside the INT8 range"),
        ([-1, 0], "UINT8", None, "-1 is outside the UINT8 range [0, 255]"),
        ([0, 65536], "UINT16", None, "65536 is outside the UINT16 range"),
        ([0, 2**31], "INT32", None, "2147483648 is outside the INT32 range"),
        ([0, 2**63], "INT64", None, "9223372036854775808 is outside the INT64 range"),
        ([-1, 0], "UINT64", None, "-1 is outside the UINT64 range"),
        ([0, 1], "BOOL", None, "element 0 is an integer (0); BOOL takes true or false"),
        (["a", 1], "BYTES", None, "element 1 is an integer (1); BYTES takes strings"),
        ([1.0, 1e39], "FP32", None, "1e+39 is outside the FP32 range"),
        ([1.0, 1e39], "BF16", None, "1e+39 is outside the FP32 range"),
        ([1.0, 70000.0], "FP16", None, "70000.0 is outside the FP16 range"),
        ([1.0, 2.0, 3.0], "FP32", None, "'data' has 3 elements, shape [1, 2] needs 2"),
        ([[1.0, 2.0], [3.0]], "FP32", [2, 2], "'data' is ragged"),
        ([[1.0, 2.0], 3.0, 4.0], "FP32", [2, 2], "mixes lists and values at depth 1"),
        ([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "FP32", [3, 2], "nested as [2, 3] does not follow"),
        ([[[1.0]], [[2.0]]], "FP32", [2], "nested as [2, 1, 1] does not follow shape [2]"),
        ([[1.0, 2.0], [3.0, 4.0]], "FP32", [2, 3], "nested as [2, 2] does not follow"),
        ([1.0, 2.0], "FLOAT32", None, "unknown datatype 'FLOAT32'; V2 datatypes: BOOL"),
    ],
)
def test_an_element_that_does_not_fit_is_a_400_naming_the_input(
    data: Any, datatype: str, shape: list[int] | None, message: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        parse(data, datatype, shape)
    assert caught.value.message.startswith("input 'x': ")
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("data", "datatype", "shape"),
    [
        ([1, 2.5], "FP32", None),  # integers are numbers
        ([3.4e38, -3.4e38], "FP32", None),
        ([[1.0, 2.0], [3.0, 4.0]], "FP32", [2, 2]),  # nested as the shape
        ([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], "FP32", [2, 2, 2]),  # rows, flat inside
        ([[[1, 2], [3, 4]]], "INT64", [1, 2, 2]),
        ([-128, 127], "INT8", None),
        ([0, 2**64 - 1], "UINT64", None),
        ([-(2**63), 2**63 - 1], "INT64", None),
        ([True, False], "BOOL", None),
        (["a", ""], "BYTES", None),
        ([1e300, -1e300], "FP64", None),
        ([65504.0, 0], "FP16", None),
        ([[], []], "FP32", [2, 0]),  # rows of nothing (no rows at all: test_edge_refusals.py)
        ([7], "INT32", []),  # a scalar
    ],
)
def test_elements_that_fit_pass(data: Any, datatype: str, shape: list[int] | None) -> None:
    parse(data, datatype, shape)


_ELEMENT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=3.3e38, max_value=1e300),  # past FP32 and BF16
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
    st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=2),
)


def _verdict(data: list[Any], datatype: str, shape: list[int], booleans: bool) -> str | None:
    try:
        check_json_data(data, datatype, shape, "x", booleans=booleans)
    except BadRequest as refused:
        return refused.message
    return None


@settings(max_examples=400, deadline=None)
@given(
    data=st.lists(_ELEMENT, max_size=6),
    datatype=st.sampled_from(["FP32", "FP64", "BF16", "FP16", "INT32"]),
    extra=st.integers(min_value=-1, max_value=1),
)
def test_one_packing_gives_the_element_checks_verdict(
    data: list[Any], datatype: str, extra: int
) -> None:
    """What the request's text rules out (no ``true``/``false``: no boolean) lets one packing
    settle flat floating-point data: the verdict is always the element checks' own."""
    text = orjson.dumps(data)
    booleans = text.find(b"true") >= 0 or text.find(b"false") >= 0
    shape = [1, max(0, len(data) + extra)]
    assert _verdict(data, datatype, shape, booleans) == _verdict(data, datatype, shape, True)

"""The large-JSON fast path (`gateway.v2.json_fast`) against the full parse, on generated
requests: the same verdict, to the message, on every one; where it accepts, the same header
less the inputs' data. Numbers come in the forms clients write them (exponents, long digit
runs, values past FP32's range, integers as floats), beside strings, literals and nesting."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import BadRequest
from gateway.v2 import request as request_module
from gateway.v2.json_fast import decode_checked
from gateway.v2.request import check_infer_request, detached, parse_infer_request

NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: orjson.dumps(v).decode()),
    st.integers(-(10**40), 10**40).map(str),
    st.sampled_from(
        [
            "1e39",
            "3.5E+38",
            "1e-05",
            "2E-7",
            "-0.0",
            "0",
            "12e2",
            "1" * 39 + ".5",
            "0." + "1" * 45,
            "65504.0",
            "65536",
            "4" + "0" * 38,
            "-4" + "0" * 38 + ".0",
        ]
    ),
)
OTHER_TEXT = st.sampled_from(['"1.5"', "true", "null", "[1.0]", "{}"])


@st.composite
def json_requests(draw: st.DrawFn) -> bytes:
    inputs = []
    for index in range(draw(st.integers(1, 2))):
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        count = math.prod(shape) + draw(st.sampled_from([0, 0, 0, 1]))
        items = [draw(st.one_of(NUMBER_TEXT, NUMBER_TEXT, OTHER_TEXT)) for _ in range(count)]
        if draw(st.booleans()):
            items = [draw(NUMBER_TEXT) for _ in range(count)]
        datatype = draw(st.sampled_from(["FP32", "FP32", "FP64", "BF16", "FP16", "INT32"]))
        spacing = draw(st.sampled_from([",", ", ", " ,\n"]))
        fields = [
            f'"name":"in{index}"',
            f'"shape":{orjson.dumps(shape).decode()}',
            f'"datatype":"{datatype}"',
            f'"data":[{spacing.join(items)}]',
        ]
        if draw(st.integers(0, 9)) == 0:
            fields.append('"parameters":{"x":1}')
        inputs.append("{" + ",".join(draw(st.permutations(fields))) + "}")
    top = [f'"inputs":[{",".join(inputs)}]']
    top += draw(
        st.sampled_from(
            [
                [],
                ['"id":"a"'],
                ['"id":7'],
                ['"outputs":[{"name":"y"}]'],
                ['"extra":1'],
                ['"parameters":{"p":123456789012345678901234}'],
            ]
        )
    )
    return ("{" + ",".join(draw(st.permutations(top))) + "}").encode()


def verdict(body: bytes) -> tuple[str, Any]:
    try:
        info = check_infer_request(body, None, 2)
    except BadRequest as error:
        return "refused", error.message
    inputs = [{k: v for k, v in t.items() if k != "data"} for t in info.header["inputs"]]
    return "ok", (info.id, {**info.header, "inputs": inputs}, info.binary_length)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_requests())
def test_the_fast_path_gives_the_full_parses_verdict(body: bytes) -> None:
    full = verdict(body)  # below FAST_JSON_MIN_BYTES: the full parse
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(request_module, "FAST_JSON_MIN_BYTES", 0)
        assert verdict(body) == full


def test_an_image_as_json_is_accepted_without_decoding_its_numbers() -> None:
    values = [round(0.001 * (i % 997), 5) for i in range(3 * 224 * 224)]
    tensor = {"name": "image", "shape": [1, 3, 224, 224], "datatype": "FP32", "data": values}
    body = orjson.dumps({"id": "img", "inputs": [tensor]})
    assert len(body) >= request_module.FAST_JSON_MIN_BYTES
    info = check_infer_request(body, None)
    assert detached(info.header) and info.id == "img"  # the fast path took it
    assert info.header["inputs"] == [{k: v for k, v in tensor.items() if k != "data"}]
    assert parse_infer_request(body, None).header["inputs"][0]["data"] == values
    tensor["data"] = [*values[:-1], 1e39]  # past FP32's range: the full parse names it
    with pytest.raises(BadRequest, match="1e\\+39 is outside the FP32 range"):
        check_infer_request(orjson.dumps({"inputs": [tensor]}), None)
    assert (
        decode_checked(b'{"inputs":[{"name":"x","shape":[2],"datatype":"FP32","data":[1,,2]}]}')
        is None
    )


EDGE = [
    "1e39",
    "3.5E+38",
    "3.4e38",
    "1e-05",
    "12e2",
    "-0.0",
    "4" + "0" * 38,
    "9" * 38,
    "1" * 39 + ".5",
    "0." + "1" * 45,
]


@pytest.mark.parametrize("number", EDGE)
@pytest.mark.parametrize("datatype", ["FP32", "FP64", "BF16"])
def test_numbers_at_the_edge_of_the_rules_get_the_full_parses_verdict(
    number: str, datatype: str
) -> None:
    body = (
        f'{{"inputs":[{{"name":"x","shape":[2],"datatype":"{datatype}","data":[1.0, {number}]}}]}}'
    ).encode()
    full = verdict(body)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(request_module, "FAST_JSON_MIN_BYTES", 0)
        assert verdict(body) == full


@pytest.mark.parametrize("offset", range(9))
@pytest.mark.parametrize("digits", [31, 38, 39, 40, 47])
def test_a_digit_run_at_every_word_offset_gets_the_full_parses_verdict(
    offset: int, digits: int
) -> None:
    """The run check looks a word (8 bytes) at a time: a run of 39 must show wherever it
    starts, and a run under 32 must not send a plain number to the full parse."""
    pad = "1.5" + "2" * offset  # moves the run across word boundaries
    run = "4" * digits
    body = (
        f'{{"inputs":[{{"name":"x","shape":[3],"datatype":"FP32","data":[{pad}, {run}, 0.5]}}]}}'
    ).encode()
    full = verdict(body)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(request_module, "FAST_JSON_MIN_BYTES", 0)
        assert verdict(body) == full
    if digits >= 39:
        assert full[0] == "refused"  # 4e38 and up is past FP32's range
    if digits < 32:
        assert decode_checked(body) is not None  # taken by the fast path, not sent on

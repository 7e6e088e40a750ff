"""What counts as "the same input" for the fault judge's record."""

from __future__ import annotations

import orjson

from gateway.v2.input_digest import input_digest


def _request(data: list[float], **extra: object) -> bytes:
    tensor = {"name": "input", "shape": [1, len(data)], "datatype": "FP32", "data": data}
    return orjson.dumps({**extra, "inputs": [tensor]})


def test_the_id_and_the_outputs_asked_for_do_not_count() -> None:
    plain = input_digest(_request([1.0, 2.0]), None)
    assert input_digest(_request([1.0, 2.0], id="a"), None) == plain
    asking = _request([1.0, 2.0], id="b", outputs=[{"name": "label"}], parameters={"x": 1})
    assert input_digest(asking, None) == plain
    reordered = b'{"inputs":[{"data":[1.0,2.0],"datatype":"FP32","shape":[1,2],"name":"input"}]}'
    assert input_digest(reordered, None) == plain


def test_the_tensors_header_and_data_count() -> None:
    plain = input_digest(_request([1.0, 2.0]), None)
    assert input_digest(_request([1.0, 2.5]), None) != plain
    renamed = _request([1.0, 2.0]).replace(b'"input"', b'"x"')
    assert input_digest(renamed, None) != plain


def test_binary_data_counts() -> None:
    header = orjson.dumps(
        {"id": "a", "inputs": [{"name": "input", "shape": [1, 2], "datatype": "FP32",
                                "parameters": {"binary_data_size": 8}}]}
    )  # fmt: skip
    one = input_digest(header + b"\x00" * 8, str(len(header)))
    other = input_digest(header + b"\x00" * 7 + b"\x01", str(len(header)))
    assert one != other
    again = header.replace(b'"id":"a"', b'"id":"bb"')
    assert input_digest(again + b"\x00" * 8, str(len(again))) == one


def test_a_body_that_is_not_a_v2_request_is_named_by_its_bytes() -> None:
    assert input_digest(b'{"poison":1}', None) == input_digest(b'{"poison":1}', None)
    assert input_digest(b'{"poison":1}', None) != input_digest(b'{"poison":2}', None)
    assert input_digest(b"not json", "x") != input_digest(b"not json!", None)

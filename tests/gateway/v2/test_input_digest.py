"""What counts as "the same input" for the fault judge's record: the body without its id."""

from __future__ import annotations

import orjson

from gateway.v2.body import Body
from gateway.v2.identity import with_request_id
from gateway.v2.input_digest import input_digest
from gateway.v2.request import parse_infer_request


def _request(data: list[float], **extra: object) -> bytes:
    tensor = {"name": "input", "shape": [1, len(data)], "datatype": "FP32", "data": data}
    return orjson.dumps({**extra, "inputs": [tensor]})


def test_the_id_does_not_count() -> None:
    plain = input_digest(_request([1.0, 2.0], id="a"), None, "a")
    assert input_digest(_request([1.0, 2.0], id="other"), None, "other") == plain
    spaced = _request([1.0, 2.0], id="b").replace(b'"id":"b"', b'"id": "b"')
    assert input_digest(spaced, None, "b") == plain
    escaped = _request([1.0, 2.0], id='q"1')  # the id as JSON writes it
    assert input_digest(escaped, None, 'q"1') == plain


def test_the_tensors_and_the_outputs_asked_for_count() -> None:
    plain = input_digest(_request([1.0, 2.0], id="a"), None, "a")
    assert input_digest(_request([1.0, 2.5], id="a"), None, "a") != plain
    renamed = _request([1.0, 2.0], id="a").replace(b'"input"', b'"x"')
    assert input_digest(renamed, None, "a") != plain
    asking = _request([1.0, 2.0], id="a", outputs=[{"name": "label"}])
    assert input_digest(asking, None, "a") != plain


def test_binary_data_counts_and_the_id_is_cut_from_the_header_only() -> None:
    def body(request_id: str, tail: bytes) -> tuple[bytes, str]:
        tensor = {
            "name": "input",
            "shape": [1, 2],
            "datatype": "FP32",
            "parameters": {"binary_data_size": len(tail)},
        }
        header = orjson.dumps({"id": request_id, "inputs": [tensor]})
        return header + tail, str(len(header))

    one = input_digest(*body("a", b"\x00" * 8), "a")
    assert input_digest(*body("bb", b"\x00" * 8), "bb") == one
    assert input_digest(*body("a", b"\x00" * 7 + b"\x01"), "a") != one
    id_in_tail = b'"id":"a"'  # bytes after the header are data, whatever they look like
    first, length = body("a", id_in_tail)
    assert input_digest(first, length, "a") != input_digest(*body("a", b'"id":"b"'), "a")


def test_a_body_without_the_id_is_named_by_all_its_bytes() -> None:
    assert input_digest(b'{"poison":1}', None, None) == input_digest(b'{"poison":1}', None, "x")
    assert input_digest(b'{"poison":1}', None, None) != input_digest(b'{"poison":2}', None, None)
    assert input_digest(b"not json", "x", None) == input_digest(b"not json", None, None)


def test_a_body_in_pieces_is_hashed_as_its_bytes_without_being_joined() -> None:
    raw = b"\x00\x00\x80?" * 4096  # 1.0 as FP32
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 4096],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    )
    length = str(len(head))
    received = Body([head[:5], head[5:] + raw[:100], raw[100:]])
    info = parse_infer_request(received, length)
    sent, sent_length, _ = with_request_id(received, length, info, "c~gw-1")
    assert len(sent.pieces) > 1
    expected = input_digest(b"".join(sent.pieces), sent_length, "c~gw-1")  # as one buffer
    assert input_digest(sent, sent_length, "c~gw-1") == expected
    assert len(sent.pieces) > 1  # not joined
    other, other_length, _ = with_request_id(Body.of(head + raw), length, info, "d~gw-2")
    assert input_digest(other, other_length, "d~gw-2") == expected  # the same input

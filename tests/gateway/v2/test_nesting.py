"""Deeply nested JSON is a 400 that says so, whatever the body's size and the path it takes
(`gateway.v2.nesting`): the inline full parse (orjson), the fast path (msgspec, which raised
`RecursionError` and so answered 500), the parse process, and every part of a request
that no other check walks (parameters, members the protocol does not name, nested data)."""

from __future__ import annotations

import pickle

import pytest

from gateway.api.parse_process import answer
from gateway.api.parsing import RequestParser
from gateway.errors import BadRequest
from gateway.v2.body import Body
from gateway.v2.json_fast import decode_checked
from gateway.v2.nesting import MAX_JSON_DEPTH
from gateway.v2.request import FAST_JSON_MIN_BYTES, check_infer_request, parse_infer_request

TOO_DEEP = f"nests deeper than {MAX_JSON_DEPTH} levels"
ROW = b"[" + b",".join([b"0.5"] * 64) + b"]"


def arrays(levels: int, inner: bytes = b"1") -> bytes:
    return b"[" * levels + inner + b"]" * levels


def objects(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def request(
    *, data: bytes = ROW, shape: bytes = b"[1,64]", tensor: bytes = b"", top: bytes = b""
) -> bytes:
    """A one-input FP32 request; ``tensor`` and ``top``: more members of the input and of the
    request (each starting with a comma)."""
    return (
        b'{"inputs":[{"name":"input","shape":'
        + shape
        + b',"datatype":"FP32","data":'
        + data
        + tensor
        + b"}]"
        + top
        + b"}"
    )


def padded(body: bytes, size: int) -> bytes:
    """``body`` grown to about ``size`` bytes by a long request id."""
    return body[:-1] + b',"id":"' + b"x" * max(size - len(body), 0) + b'"}'


# What the attack sent: bodies of 0.4 to 16 MB nested 200 k to 8 M deep, here from 40 KB (the
# fast path inline) through 400 KB to 4 MB (the worker's size).
ATTACKS = {
    "data 20k deep, 40 KB": request(data=arrays(20_000)),
    "data 200k deep, 400 KB": request(data=arrays(200_000)),
    "data 2M deep, 4 MB": request(data=arrays(2_000_000)),
    "parameters 200k deep, 1.2 MB": request(tensor=b',"parameters":' + objects(200_000)),
    "request parameters 70k deep": request(top=b',"parameters":' + objects(70_000)),
    "outputs 100k deep": request(top=b',"outputs":' + arrays(100_000)),
    "a whole array 2M deep": arrays(2_000_000),
}


@pytest.mark.parametrize("body", ATTACKS.values(), ids=ATTACKS.keys())
def test_a_deeply_nested_body_is_a_400_that_says_so_on_the_edges_path(body: bytes) -> None:
    assert len(body) >= FAST_JSON_MIN_BYTES  # the size from which the fast path is tried
    for parse in (check_infer_request, parse_infer_request):
        with pytest.raises(BadRequest, match=TOO_DEEP):
            parse(body, None)


@pytest.mark.parametrize("body", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_fast_path_leaves_a_deep_body_to_the_full_parse(body: bytes) -> None:
    assert decode_checked(body) is None


def test_the_parse_process_answers_a_deep_body_with_the_400_not_a_bug() -> None:
    body = ATTACKS["data 2M deep, 4 MB"]
    kind, value = pickle.loads(answer(pickle.dumps((None, None)), body))
    assert kind == "error" and isinstance(value, BadRequest), (kind, value)
    assert TOO_DEEP in value.message


async def test_a_deep_body_through_the_worker_process_is_the_400() -> None:
    parser = RequestParser(inline_max_bytes=0, offload="process")
    try:
        with pytest.raises(BadRequest, match=TOO_DEEP):
            await parser.offload(Body.of(ATTACKS["parameters 200k deep, 1.2 MB"]), None, None)
        ok = await parser.offload(Body.of(padded(request(), 3 * 1024 * 1024)), None, None)
        assert ok.header["inputs"][0]["name"] == "input"
    finally:
        await parser.close()


def fits(body: bytes) -> bool:
    try:
        check_infer_request(body, None)
    except BadRequest as refused:
        assert TOO_DEEP in refused.message, refused.message
        return False
    return True


@pytest.mark.parametrize("size", [1_000, 100_000])
def test_the_bound_is_the_same_for_every_part_that_can_nest(size: int) -> None:
    """At the bound a request passes, one level past it not: the request's object is level
    1, its parameters 2, an input 3, the input's data and parameters 4."""
    edge = MAX_JSON_DEPTH
    for levels, ok in ((edge - 2, True), (edge - 1, False)):
        parameters = b',"parameters":{"p":' + arrays(levels) + b"}"
        assert fits(padded(request(top=parameters), size)) is ok
        assert fits(padded(request(top=b',"extra":' + arrays(levels + 1)), size)) is ok
    for levels, ok in ((edge - 4, True), (edge - 3, False)):
        parameters = b',"parameters":{"p":' + arrays(levels) + b"}"
        assert fits(padded(request(tensor=parameters), size)) is ok
        assert fits(padded(request(tensor=b',"extra":' + arrays(levels + 1)), size)) is ok
        outputs = b',"outputs":[{"name":"y","parameters":{"p":' + arrays(levels) + b"}}]"
        assert fits(padded(request(top=outputs), size)) is ok
    for rank, ok in ((edge - 3, True), (edge - 2, False)):
        shape = b"[" + b",".join([b"1"] * rank) + b"]"
        assert fits(padded(request(data=arrays(rank, b"0.5"), shape=shape), size)) is ok


def test_an_ordinary_request_with_flat_parameters_and_nested_rows_passes() -> None:
    body = request(
        data=b"[[0.5,0.5],[0.5,0.5]]",
        shape=b"[2,2]",
        tensor=b',"parameters":{"content_type":"x","n":1}',
        top=b',"parameters":{"tags":["a","b"],"opts":{"k":[1,2]}},"outputs":[{"name":"y"}]',
    )
    info = check_infer_request(body, None)
    assert info.header["parameters"]["opts"] == {"k": [1, 2]}

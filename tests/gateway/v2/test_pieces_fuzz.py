"""The header-only, chunked request path against the old full parse, on generated requests.

Every request (JSON or binary tensors, valid or broken: wrong sizes, NaN bytes, a bad header
length, ids of every kind) is cut into random chunks as a client's body arrives, then parsed
as the edge now does (`Body` pieces, only the JSON header parsed) and as it did before (one
buffer, `old_full_parse`): the verdict must be the same, to the message. What then leaves for
a replica (the id spliced in, the vectored write) must be, joined, the old bytes with only
the id changed.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config.endpoint import Endpoint
from gateway.errors import BadRequest
from gateway.upstream.transport.http1 import VECTORED_MIN_BYTES, encode_request
from gateway.v2.body import Body
from gateway.v2.identity import with_request_id
from gateway.v2.request import InferRequestInfo, parse_infer_request
from tests.gateway.v2 import old_full_parse

SIZES = {"FP16": 2, "FP32": 4, "FP64": 8, "INT32": 4, "UINT8": 1, "BOOL": 1}
SPECIAL = [b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\x80?", b"\x00\x7c", b"\x00"]


@st.composite
def tensors(draw: st.DrawFn, binary: bool) -> tuple[dict[str, Any], bytes]:
    datatype = draw(st.sampled_from([*SIZES, "BYTES", "FLOAT32"]))
    shape = draw(st.lists(st.integers(0, 4), min_size=0, max_size=3))
    count = int(np.prod(shape)) if shape else 1
    tensor: dict[str, Any] = {
        "name": draw(st.sampled_from(["a", "b", ""])),
        "shape": shape,
        "datatype": datatype,
    }
    if not binary:
        values = st.one_of(
            st.floats(allow_nan=False, allow_infinity=False),
            st.integers(-300, 300),
            st.booleans(),
            st.text(max_size=3),
            st.just(1e39),
        )
        tensor["data"] = draw(
            st.lists(values, min_size=count, max_size=count + draw(st.integers(0, 1)))
        )
        return tensor, b""
    size = count * SIZES.get(datatype, 1) + draw(st.sampled_from([0, 0, 0, 1, -1]))
    size = max(size, 0)
    raw = b"".join(draw(st.lists(st.sampled_from(SPECIAL), min_size=size, max_size=size)))[:size]
    raw = raw.ljust(size, b"\x01")
    tensor["parameters"] = {"binary_data_size": draw(st.sampled_from([size, size, size + 2]))}
    return tensor, raw


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, str | None]:
    binary = draw(st.booleans())
    pairs = draw(st.lists(tensors(binary), min_size=1, max_size=3))
    header: dict[str, Any] = {"inputs": [t for t, _ in pairs]}
    ident = draw(st.sampled_from([None, "1", 'q"x', 7]))
    if ident is not None:
        header = {"id": ident, **header} if draw(st.booleans()) else {**header, "id": ident}
    if draw(st.booleans()):
        header["outputs"] = [{"name": "y", "parameters": {"binary_data": True}}]
    head = b" " * draw(st.integers(0, 2)) + orjson.dumps(header)
    tail = b"".join(raw for _, raw in pairs) + draw(st.sampled_from([b"", b"", b"\x00"]))
    if not binary:
        return head + tail, None
    length = draw(st.sampled_from([str(len(head))] * 4 + [str(len(head) + 1), "x", "0"]))
    return head + tail, length


def chunked(body: bytes, cuts: list[int]) -> Body:
    points = sorted({min(c, len(body)) for c in cuts} | {0, len(body)})
    return Body([body[a:b] for a, b in pairwise(points) if b > a])


def verdict(parse: Any, body: Any, length: str | None) -> tuple[str, Any]:
    try:
        info: InferRequestInfo = parse(body, length, 3)
    except BadRequest as error:
        return "refused", error.message
    return "ok", (info.id, info.header, info.binary_length)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.lists(st.integers(0, 400), max_size=6))
def test_the_chunked_header_only_parse_gives_the_old_verdict(
    request: tuple[bytes, str | None], cuts: list[int]
) -> None:
    body, length = request
    old = verdict(old_full_parse.parse_infer_request, body, length)
    assert verdict(parse_infer_request, chunked(body, cuts), length) == old
    assert verdict(parse_infer_request, body, length) == old


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.lists(st.integers(0, 400), max_size=6), st.sampled_from(["s~1", 'é"~2']))
def test_what_leaves_is_the_old_body_with_only_its_id_changed(
    request: tuple[bytes, str | None], cuts: list[int], sent_id: str
) -> None:
    body, length = request
    if verdict(old_full_parse.parse_infer_request, body, length)[0] != "ok":
        return
    info = parse_infer_request(body, length)
    new, new_length, new_info = with_request_id(chunked(body, cuts), length, info, sent_id)
    joined = new.joined()
    assert len(new) == len(joined) and new_info.id == sent_id
    end = len(joined) if new_length is None else int(new_length)
    split = len(body) if length is None else int(length)
    assert joined[end:] == body[split:]  # the tensor bytes as they came
    assert orjson.loads(joined[:end]) == {**orjson.loads(body[:split]), "id": sent_id}
    assert parse_infer_request(new, new_length).header == new_info.header
    endpoint = Endpoint("h", 1)
    vectored = encode_request(endpoint, "POST", "/infer", new, {"x-a": "b"})
    single = encode_request(endpoint, "POST", "/infer", joined, {"x-a": "b"})
    flat = vectored if isinstance(vectored, bytes) else b"".join(vectored)
    assert flat == single
    assert isinstance(vectored, list) == (len(joined) >= VECTORED_MIN_BYTES)

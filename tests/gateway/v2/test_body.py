"""A body kept as the buffers it arrived in: views and splices share its bytes."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.errors import BadRequest
from gateway.v2.body import Body, as_bytes
from gateway.v2.finite import check_binary_finite


def test_pieces_are_viewed_and_spliced_not_copied() -> None:
    chunks = [b"abc", b"defg", b"h"]
    body = Body(chunks)
    assert len(body) == 8 and body.head(5) == b"abcde" and b"".join(body.views(2, 6)) == b"cdef"
    spliced = body.spliced(4, b"XY", cut=2)
    assert {id(v.obj) for v in spliced.pieces if isinstance(v, memoryview)} == set(map(id, chunks))
    assert spliced.joined() == b"abcdXYgh" and len(spliced) == 8
    # joined once, the body is that one buffer: the chunks are not held twice
    assert body.joined() == b"abcdefgh" and body.joined() is body.joined()
    assert body.pieces == (body.joined(),) and len(body) == 8
    one = b"single"
    assert Body.of(one).joined() is one and as_bytes(Body.of(one)) is one and as_bytes(one) is one


def test_a_nan_split_between_two_chunks_is_found() -> None:
    values = np.ones(6, dtype=np.float32)
    values[2] = np.nan
    raw = values.tobytes()
    body = Body([raw[:9], raw[9:10], raw[10:]])  # the NaN's four bytes in three chunks
    with pytest.raises(BadRequest, match=r"NaN or infinity \(1 values\)"):
        check_binary_finite(body.views(0), "FP32", "x")
    check_binary_finite(Body([raw[:9], raw[9:]]).views(0, 8), "FP32", "x")  # before the NaN

"""A body kept as the buffers it arrived in: views and splices share its bytes."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.errors import BadRequest
from gateway.v2.body import Body, as_bytes
from gateway.v2.finite import GROUP_BYTES, _grouped, check_binary_finite


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


def test_a_large_read_is_checked_in_place_after_the_small_ones_before_it() -> None:
    small = [memoryview(b"a" * 10), memoryview(b"b" * 20)]
    large = memoryview(b"c" * GROUP_BYTES)
    tail = memoryview(b"d" * 30)
    groups = list(_grouped([*small, large, tail]))
    assert [bytes(g) for g in groups] == [b"a" * 10 + b"b" * 20, bytes(large), bytes(tail)]
    assert groups[1] is large and groups[2] is tail  # neither copied into a group


@pytest.mark.parametrize("seed", range(6))
def test_non_finite_values_are_counted_however_the_body_was_cut(seed: int) -> None:
    """Small reads are checked joined, large ones in place, values split across either."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(-1, 1, 90_000).astype(np.float32)  # 360 KB: several groups
    bad = rng.choice(values.size, size=int(rng.integers(1, 9)), replace=False)
    values[bad] = rng.choice(np.array([np.nan, np.inf, -np.inf], dtype=np.float32), bad.size)
    raw = values.tobytes()
    cuts = np.sort(
        rng.choice(np.arange(1, len(raw)), size=int(rng.integers(5, 300)), replace=False)
    )
    sizes = np.diff(np.concatenate([[0], cuts, [len(raw)]]))
    if seed % 2:  # a mix of large reads (checked in place) and runs of small ones
        sizes = np.concatenate([[200_000], sizes[sizes < 4096]])
        sizes = np.append(sizes, len(raw) - sizes.sum()) if sizes.sum() < len(raw) else sizes
    pieces, at = [], 0
    for size in sizes:
        if at >= len(raw):
            break
        pieces.append(raw[at : at + int(size)])
        at += int(size)
    if at < len(raw):
        pieces.append(raw[at:])
    assert b"".join(pieces) == raw
    with pytest.raises(BadRequest, match=rf"NaN or infinity \({bad.size} values\)"):
        check_binary_finite(Body(pieces).views(0), "FP32", "x")
    clean = np.nan_to_num(values, nan=0.0, posinf=0.0, neginf=0.0).tobytes()
    check_binary_finite(Body([clean[:100], clean[100:5000], clean[5000:]]).views(0), "FP32", "x")

"""The same bytes split anywhere give the same requests: reads are fed in slices, paused and
resumed as requests wait, so where a read ends must never change what is parsed.

Hypothesis builds a stream of pipelined requests (bodiless, Content-Length, chunked with
extensions and trailers; sometimes a broken one), feeds it whole and cut at random points,
and the server must see the same requests and reach the same verdict. Bounded and
derandomized, so it is deterministic and takes a few seconds.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.worker.http.limits import ClientLimits
from tests.gateway.worker.http.wire import serve_bytes

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
LIMITS = ClientLimits(min_body_rate=0, max_pipelined=2)  # small: the queue fills and pauses

BODY = st.binary(max_size=60) | st.binary(min_size=5000, max_size=9000)
EXTENSION = st.sampled_from([b"", b";a=b", b';n="v w"', b";x"])
BROKEN = st.sampled_from(
    [
        b"NOT HTTP\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\ncontent-length: x\r\n\r\n",
    ]
)


@st.composite
def request(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["get", "length", "chunked"]))
    path = b"/%d?q=%d" % (draw(st.integers(0, 99)), draw(st.integers(0, 9)))
    if kind == "get":
        return b"GET %s HTTP/1.1\r\nHost: a\r\nX-A: %d\r\n\r\n" % (path, draw(st.integers(0, 9)))
    body = draw(BODY)
    if kind == "length":
        return b"POST %s HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n%s" % (
            path,
            len(body),
            body,
        )
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=3)))
    parts = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True) if b > a]
    chunks = b"".join(b"%x%s\r\n%s\r\n" % (len(p), draw(EXTENSION), p) for p in parts)
    trailer = draw(st.sampled_from([b"", b"X-T: 1\r\n"]))
    return b"POST %s HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n%s0%s\r\n%s\r\n" % (
        path,
        chunks,
        draw(EXTENSION),
        trailer,
    )


@st.composite
def stream(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    wire = b"".join(draw(st.lists(request(), min_size=1, max_size=6)))
    if draw(st.integers(0, 4)) == 0:
        wire += draw(BROKEN)
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(wire) - 1)), max_size=12))))
    return wire, cuts


@FUZZ
@given(stream())
async def test_a_stream_cut_anywhere_is_served_as_the_whole_one(
    case: tuple[bytes, list[int]],
) -> None:
    wire, cuts = case
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True) if b > a]
    whole = await serve_bytes([wire], LIMITS)
    split = await serve_bytes(pieces, LIMITS)
    assert split.requests == whole.requests
    assert split.refusal == whole.refusal
    assert whole.requests  # the first request is always whole and valid

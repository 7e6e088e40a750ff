"""RFC 9112 framing of replies by `Connection`, fed bytes directly (no socket, no loop run)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from gateway.errors import UpstreamConnectError, UpstreamProtocolError
from gateway.upstream.transport.limits import ReplyLimits
from tests.gateway.upstream.wire import Result, exchange

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    new = asyncio.new_event_loop()
    try:
        yield new
    finally:
        new.close()


def _reply(result: Result) -> tuple[int, bytes]:
    assert result.reply is not None, result.error
    return result.reply.status, result.reply.body


def _refused(result: Result, match: str = "") -> str:
    assert isinstance(result.error, UpstreamProtocolError), result
    assert match in str(result.error)
    return str(result.error)


# --- interim (1xx) replies ----------------------------------------------------------------------


@pytest.mark.parametrize("interim", [b"100 Continue", b"102 Processing", b"103 Early Hints"])
def test_interim_replies_are_skipped(loop: asyncio.AbstractEventLoop, interim: bytes) -> None:
    wire = b"HTTP/1.1 " + interim + b"\r\nLink: </a>; rel=preload\r\n\r\n" + OK
    result = exchange(loop, [wire], close=False)
    assert _reply(result) == (200, b"ok")
    assert result.reply is not None and "link" not in result.reply.headers
    assert result.reusable


def test_interim_reply_alone_is_not_an_answer(loop: asyncio.AbstractEventLoop) -> None:
    result = exchange(loop, [b"HTTP/1.1 100 Continue\r\n\r\n"], close=False)
    assert (result.reply, result.error) == (None, None)  # still waiting for the final reply


def test_several_interims_split_anywhere(loop: asyncio.AbstractEventLoop) -> None:
    wire = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + OK
    for cut in range(1, len(wire)):
        assert _reply(exchange(loop, [wire[:cut], wire[cut:]], close=False)) == (200, b"ok")


def test_switching_protocols_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    wire = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"
    _refused(exchange(loop, [wire + OK]), "unexpected status 101")


def test_interim_reply_that_closes_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    wire = b"HTTP/1.1 100 Continue\r\nConnection: close\r\n\r\n" + OK
    _refused(exchange(loop, [wire]), "interim reply that closes")


def test_status_below_100_is_refused(loop: asyncio.AbstractEventLoop) -> None:
    _refused(exchange(loop, [b"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n"]), "status 99")


# --- bodies and their framing -------------------------------------------------------------------


def test_close_delimited_2xx_is_refused_at_its_head(loop: asyncio.AbstractEventLoop) -> None:
    result = exchange(loop, [b"HTTP/1.1 200 OK\r\n\r\n", b'{"outputs": ['], close=False)
    _refused(result, "neither Content-Length nor chunked")
    assert result.bytes_fed == len(b"HTTP/1.1 200 OK\r\n\r\n")  # aborted before the body


def test_close_delimited_error_reply_is_read_to_the_close(
    loop: asyncio.AbstractEventLoop,
) -> None:
    result = exchange(loop, [b"HTTP/1.1 503 Busy\r\n\r\nover", b"loaded"])
    assert _reply(result) == (503, b"overloaded")
    assert not result.reusable


def test_close_delimited_error_reply_is_capped(loop: asyncio.AbstractEventLoop) -> None:
    limits = ReplyLimits(max_reply_body_bytes=4)
    result = exchange(loop, [b"HTTP/1.1 503 Busy\r\n\r\nover", b"loaded"], limits=limits)
    _refused(result, "max_reply_body_bytes=4")


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified"])
def test_bodyless_statuses_complete_at_their_head(
    loop: asyncio.AbstractEventLoop, status: bytes
) -> None:
    wire = b"HTTP/1.1 " + status + b"\r\nContent-Length: 1234\r\n\r\n"  # 304: the entity's size
    result = exchange(loop, [wire], close=False, limits=ReplyLimits(max_reply_body_bytes=10))
    assert _reply(result) == (int(status[:3]), b"")
    assert result.reusable


def test_reply_to_head_completes_at_its_head_and_is_not_reused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
    result = exchange(loop, [wire], head=True, close=False)
    assert _reply(result) == (200, b"")
    assert result.reply is not None and result.reply.headers["content-length"] == "100"
    assert not result.reusable  # httptools still expects 100 body bytes


def test_chunked_with_extensions_and_trailers(loop: asyncio.AbstractEventLoop) -> None:
    wire = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: head\r\n\r\n"
        b'2;name="v a"\r\nok\r\n1;x\r\n!\r\n0;end\r\nX-A: trailer\r\nX-T: 1\r\n\r\n'
    )
    result = exchange(loop, [wire], close=False)
    assert _reply(result) == (200, b"ok!")
    assert result.reply is not None
    assert result.reply.headers["x-a"] == "head"  # trailers are never merged into the head
    assert "x-t" not in result.reply.headers
    assert result.reusable


@pytest.mark.parametrize(
    ("head", "match"),
    [
        (b"Transfer-Encoding: gzip", "Transfer-Encoding"),
        (b"Transfer-Encoding: gzip, chunked", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 2", "Content-Length"),
        (b"Content-Length: 2\r\nContent-Length: 2", "Content-Length"),
        (b"Content-Length: 2\r\nContent-Length: 3", "Content-Length"),
        (b"Content-Length: 2, 2", "Content-Length"),
        (b"Content-Length: -2", "Content-Length"),
    ],
)
def test_ambiguous_framing_is_refused(
    loop: asyncio.AbstractEventLoop, head: bytes, match: str
) -> None:
    wire = b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n2\r\nok\r\n0\r\n\r\n"
    _refused(exchange(loop, [wire]), match)


@pytest.mark.parametrize(
    "wire",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Le",
    ],
)
def test_reply_cut_short_by_the_close_is_refused(
    loop: asyncio.AbstractEventLoop, wire: bytes
) -> None:
    _refused(exchange(loop, [wire]), "closed the connection mid-reply")


def test_close_before_any_byte_is_a_connect_error(loop: asyncio.AbstractEventLoop) -> None:
    assert isinstance(exchange(loop, []).error, UpstreamConnectError)


# --- headers ------------------------------------------------------------------------------------


def test_repeated_headers_are_joined_in_order(loop: asyncio.AbstractEventLoop) -> None:
    wire = (
        b"HTTP/1.1 200 OK\r\nX-R: a\r\nx-r: b \r\nX-S: 1\r\nX-R:  c\t\r\nContent-Length: 0\r\n\r\n"
    )
    reply = exchange(loop, [wire]).reply
    assert reply is not None
    assert dict(reply.headers) == {"x-r": "a, b, c", "x-s": "1", "content-length": "0"}


def test_ten_thousand_repeats_stop_at_the_count_cap(loop: asyncio.AbstractEventLoop) -> None:
    wire = b"HTTP/1.1 200 OK\r\n" + b"X-R: v\r\n" * 10_000 + b"Content-Length: 0\r\n\r\n"
    result = exchange(loop, [wire], limits=ReplyLimits(max_reply_header_count=100))
    _refused(result, "max_reply_header_count=100")


def test_header_count_includes_interims_and_trailers(loop: asyncio.AbstractEventLoop) -> None:
    wire = (
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n"
    )
    assert exchange(loop, [wire], limits=ReplyLimits(max_reply_header_count=3)).reply
    _refused(exchange(loop, [wire], limits=ReplyLimits(max_reply_header_count=2)))


def test_header_bytes_are_capped_in_one_read(loop: asyncio.AbstractEventLoop) -> None:
    wire = b"HTTP/1.1 200 OK\r\nX-Big: " + b"v" * 200 + b"\r\nContent-Length: 0\r\n\r\n"
    limits = ReplyLimits(max_reply_header_bytes=100)
    _refused(exchange(loop, [wire], limits=limits), "max_reply_header_bytes=100")


def test_a_head_that_never_ends_is_capped_while_it_streams(
    loop: asyncio.AbstractEventLoop,
) -> None:
    reads = [b"HTTP/1.1 200 OK\r\nX-Big: "] + [b"v" * 1000] * 1000  # 1 MB, no end of line
    result = exchange(loop, reads, limits=ReplyLimits(max_reply_header_bytes=64 * 1024))
    _refused(result, "reply head over max_reply_header_bytes")
    assert result.bytes_fed < 70 * 1024


def test_trailers_that_never_end_are_capped(loop: asyncio.AbstractEventLoop) -> None:
    reads = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: "]
    reads += [b"v" * 1000] * 1000
    result = exchange(loop, reads, limits=ReplyLimits(max_reply_header_bytes=64 * 1024))
    _refused(result, "chunk framing and trailers over max_reply_header_bytes")
    assert result.bytes_fed < 70 * 1024


# --- body cap -----------------------------------------------------------------------------------


def test_declared_length_over_the_cap_is_refused_at_the_head(
    loop: asyncio.AbstractEventLoop,
) -> None:
    wire = b"HTTP/1.1 200 OK\r\nContent-Length: 1048577\r\n\r\n"
    result = exchange(loop, [wire, b"x" * 1000], limits=ReplyLimits(max_reply_body_bytes=1 << 20))
    _refused(result, "max_reply_body_bytes=1048576")
    assert result.bytes_fed == len(wire)


def test_chunked_body_over_the_cap_is_refused_while_it_streams(
    loop: asyncio.AbstractEventLoop,
) -> None:
    chunk = b"%x\r\n%s\r\n" % (1000, b"x" * 1000)
    reads = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"] + [chunk] * 10_000
    result = exchange(loop, reads, limits=ReplyLimits(max_reply_body_bytes=100_000))
    _refused(result, "max_reply_body_bytes=100000")
    assert result.bytes_fed < 110_000


def test_body_exactly_at_the_cap_is_accepted(loop: asyncio.AbstractEventLoop) -> None:
    assert exchange(loop, [OK], limits=ReplyLimits(max_reply_body_bytes=2)).reply


# --- what arrives after the reply ---------------------------------------------------------------


def test_a_second_reply_in_the_same_read_stops_reuse(loop: asyncio.AbstractEventLoop) -> None:
    result = exchange(loop, [OK + OK], close=False)
    assert _reply(result) == (200, b"ok")
    assert not result.reusable


def test_bytes_after_the_reply_in_a_later_read_stop_reuse(
    loop: asyncio.AbstractEventLoop,
) -> None:
    result = exchange(loop, [OK, b"H"], close=False)
    assert _reply(result) == (200, b"ok")
    assert not result.reusable

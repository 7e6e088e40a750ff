"""The lean server on real sockets: what uvicorn's guarded protocol guaranteed, kept.

Head size and field count, head and body timeouts, the linger after an error, early answers,
keep-alive, 100-continue, HEAD, Host rules, bodies handed over in the pieces they arrived in,
pipelining. Clients are raw sockets, so trickling, oversized and half-sent requests are
exactly what is sent. Run on uvloop and on asyncio's own loop.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib

import orjson
import pytest

from tests.gateway.worker.http.conftest import Served
from tests.gateway.worker.http.served import WAIT_S, answer, closed, connect, post, until


async def test_whole_and_quickly_split_requests_are_served_on_a_kept_alive_connection(
    served: Served,
) -> None:
    reader, writer = await connect(served.port)
    writer.write(post("/", b"abc") + post("/", b""))  # pipelined
    assert (await answer(reader))[::2] == (200, b'{"size":3}')
    assert (await answer(reader))[::2] == (200, b'{"size":0}')
    message = post("/", b"x" * 10_000)
    writer.write(message[:20])
    await asyncio.sleep(0.05)
    writer.write(message[20:5000])
    await asyncio.sleep(0.05)
    writer.write(message[5000:])
    assert (await answer(reader))[::2] == (200, b'{"size":10000}')
    writer.close()


async def test_a_pipelined_head_after_a_large_body_is_not_counted_with_it(served: Served) -> None:
    reader, writer = await connect(served.port)
    second = post("/", b"z" * 7)
    writer.write(post("/", b"b" * 20_000) + second[:30])  # one chunk: body over the head limit
    await asyncio.sleep(0.1)
    writer.write(second[30:])
    assert (await answer(reader))[::2] == (200, b'{"size":20000}')
    assert (await answer(reader))[::2] == (200, b'{"size":7}')
    writer.close()


async def test_a_connection_that_sends_nothing_gets_408_and_is_closed(timed: Served) -> None:
    reader, writer = await connect(timed.port)
    status, headers, body = await answer(reader)
    assert status == 408 and headers["connection"] == "close"
    assert orjson.loads(body) == {"error": "request headers not complete within 0.5 s"}
    assert await closed(reader)
    writer.close()


async def test_trickled_headers_are_cut_with_408(timed: Served) -> None:
    reader, writer = await connect(timed.port)
    writer.write(b"GET / HTTP/1.1\r\n")

    async def trickle() -> None:
        for _ in range(100):
            writer.write(b"x")
            await asyncio.sleep(0.05)

    trickling = asyncio.create_task(trickle())
    status, _, body = await answer(reader)
    assert status == 408 and b"request headers not complete" in body
    assert await closed(reader)
    trickling.cancel()
    writer.close()


async def test_a_trickled_body_is_cut_with_408_and_the_handler_is_told(timed: Served) -> None:
    reader, writer = await connect(timed.port)
    writer.write(post("/", b"x" * 100)[:-90])  # the head and 10 bytes of the body
    status, _, body = await answer(reader)
    assert status == 408
    assert orjson.loads(body) == {"error": "request body not complete within 0.5 s"}
    assert await closed(reader)
    await until(lambda: timed.app.seen)
    assert timed.app.seen == [  # its own 400 was dropped
        {"error": 408, "message": "request body not complete within 0.5 s"}
    ]
    writer.close()


@pytest.mark.parametrize("kind", ["many headers", "one huge header", "huge url"])
async def test_a_head_over_the_limit_gets_431(served: Served, kind: str) -> None:
    reader, writer = await connect(served.port)
    if kind == "many headers":
        writer.write(b"GET / HTTP/1.1\r\n" + b"x-h: %s\r\n" % (b"v" * 100) * 50 + b"\r\n")
    elif kind == "one huge header":
        writer.write(b"GET / HTTP/1.1\r\nx-big: " + b"a" * 20_000)  # still incomplete
    else:
        writer.write(b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n")
    status, headers, body = await answer(reader)
    assert status == 431 and headers["connection"] == "close"
    assert orjson.loads(body) == {"error": "request line and headers over 4096 bytes"}
    assert await closed(reader)
    writer.close()


async def test_more_header_fields_than_allowed_get_431(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"GET / HTTP/1.1\r\nhost: t\r\n" + b"x: 1\r\n" * 100 + b"\r\n")  # 101 fields
    status, _, body = await answer(reader)
    assert status == 431 and orjson.loads(body) == {"error": "more than 100 header fields"}
    writer.close()


async def test_a_client_still_sending_a_huge_head_is_cut_off(served: Served) -> None:
    _, writer = await connect(served.port)
    writer.write(b"GET / HTTP/1.1\r\nx-big: ")
    sent = 0
    with pytest.raises(ConnectionError):
        async with asyncio.timeout(WAIT_S):
            while sent < 55 * 1024 * 1024:
                writer.write(b"a" * 65536)
                await writer.drain()
                sent += 65536
    assert sent < 8 * 1024 * 1024  # read at most the limit, a read or two and the linger
    writer.close()


async def test_an_early_answer_drops_the_body_then_keep_alive_applies(timed: Served) -> None:
    reader, writer = await connect(timed.port)
    writer.write(post("/early", b"y" * 200_000))
    assert (await answer(reader))[0] == 413
    writer.write(post("/", b"after"))  # the same connection still serves
    assert (await answer(reader))[::2] == (200, b'{"size":5}')
    assert await closed(reader)  # idle: the keep-alive timeout (1 s) closes it
    writer.close()


async def test_a_body_left_half_sent_after_an_early_answer_is_cut(timed: Served) -> None:
    reader, writer = await connect(timed.port)
    writer.write(post("/early", b"y" * 1000)[:-900])
    assert (await answer(reader))[0] == 413
    assert await closed(reader)  # the body timeout still bounds the rest, with no second answer
    writer.close()


async def test_unparseable_http_gets_a_json_400(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"NOT HTTP\r\n\r\n")
    status, headers, body = await answer(reader)
    assert status == 400 and orjson.loads(body)["error"].startswith("invalid HTTP request")
    assert headers["connection"] == "close" and await closed(reader)
    writer.close()


async def test_head_and_expect_continue_requests_are_answered_whole(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"HEAD / HTTP/1.1\r\nhost: t\r\n\r\n")
    async with asyncio.timeout(WAIT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ") and b"content-length: 10\r\n" in head
    writer.write(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")  # nothing of a body after a HEAD
    served.app.release.set()
    assert (await answer(reader))[::2] == (200, b'{"slow":true}')
    writer.close()
    reader, writer = await connect(served.port)
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\nexpect: 100-continue\r\n\r\n")
    async with asyncio.timeout(WAIT_S):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"abc")
    assert (await answer(reader))[::2] == (200, b'{"size":3}')
    writer.close()


async def test_an_early_answer_never_invites_the_body(served: Served) -> None:
    reader, writer = await connect(served.port)
    head = b"POST /early HTTP/1.1\r\nhost: t\r\ncontent-length: 9\r\nexpect: 100-continue\r\n\r\n"
    writer.write(head)
    status, _, _ = await answer(reader)
    assert status == 413  # no 100 Continue before it
    writer.close()


async def test_keep_alive_closes_an_idle_connection_a_timeout_after_its_last_answer(
    timed: Served,
) -> None:
    """One timer per connection: the first idle spell's timer must not cut a later spell short."""
    loop = asyncio.get_running_loop()
    reader, writer = await connect(timed.port)
    writer.write(post("/", b"a"))
    assert (await answer(reader))[0] == 200
    await asyncio.sleep(0.7)  # idle; the keep-alive timeout (1 s) is not reached
    writer.write(post("/", b"b"))
    assert (await answer(reader))[0] == 200
    await asyncio.sleep(0.5)  # 1.2 s after the first answer: open, it was busy at 0.7 s
    writer.write(post("/", b"c"))
    assert (await answer(reader))[0] == 200
    answered = loop.time()
    assert await closed(reader)
    assert 1.0 - 0.01 <= loop.time() - answered < WAIT_S
    writer.close()


@pytest.mark.parametrize(
    ("refused", "why", "allowed"),
    [
        (
            b"GET / HTTP/1.1\r\nHost: localhost\r\nhost: evil.example\r\n\r\n",
            "more than one Host header",
            post("/", b"ok"),
        ),  # one Host: served as before
        (
            b"POST / HTTP/1.1\r\ncontent-length: 2\r\n\r\nok",
            "an HTTP/1.1 request without a Host header",
            b"POST / HTTP/1.0\r\ncontent-length: 2\r\n\r\nok",
        ),  # HTTP/1.0 may omit it
    ],
    ids=["two-hosts", "no-host"],
)
async def test_a_head_with_two_hosts_or_none_gets_a_json_400_and_the_connection_closes(
    served: Served, refused: bytes, why: str, allowed: bytes
) -> None:
    reader, writer = await connect(served.port)
    writer.write(refused)
    status, headers, body = await answer(reader)
    assert status == 400 and headers["connection"] == "close"
    assert orjson.loads(body) == {"error": f"invalid HTTP request: {why} (RFC 9112, 3.2)"}
    assert await closed(reader) and served.app.seen == []
    writer.close()
    reader, writer = await connect(served.port)
    writer.write(allowed)
    assert (await answer(reader))[::2] == (200, b'{"size":2}')
    writer.close()


async def test_a_large_body_reaches_the_handler_whole_in_the_pieces_it_arrived_in(
    served: Served,
) -> None:
    body = bytes(range(256)) * 16 * 1024  # 4 MiB: reading pauses and resumes on the way
    reader, writer = await connect(served.port)
    writer.write(post("/digest", body))
    status, _, doc = await answer(reader)
    got = orjson.loads(doc)
    assert status == 200 and got["sha256"] == hashlib.sha256(body).hexdigest()
    assert got["chunks"] > 1  # handed over as read, never grown into one buffer
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:7], body[7:300_000]))
    writer.write(
        b"POST /digest HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
        + chunked
        + b"0\r\n\r\n"
    )
    status, _, doc = await answer(reader)
    assert (
        status == 200 and orjson.loads(doc)["sha256"] == hashlib.sha256(body[:300_000]).hexdigest()
    )
    writer.close()


async def test_a_client_that_leaves_cancels_its_handler(served: Served) -> None:
    _, writer = await connect(served.port)
    writer.write(post("/listen", b"x" * 100_000))
    await until(lambda: {"listening": True} in served.app.seen)
    assert {"cancelled": True} not in served.app.seen  # it waits, it does not spin
    writer.close()
    await until(lambda: {"cancelled": True} in served.app.seen)


async def test_a_client_that_half_closes_after_its_request_has_left(served: Served) -> None:
    """RFC 9112 9.6: a server cannot tell a half-close from a close until it writes; the end
    of the client's stream is its leaving, as nginx reads it (499)."""
    reader, writer = await connect(served.port)
    writer.write(post("/listen", b"x"))
    await until(lambda: {"listening": True} in served.app.seen)
    writer.write_eof()
    await until(lambda: {"cancelled": True} in served.app.seen)
    assert await closed(reader)


async def test_an_http10_request_closes_unless_kept_alive_and_then_says_so(served: Served) -> None:
    reader, writer = await connect(served.port)
    writer.write(b"POST / HTTP/1.0\r\ncontent-length: 1\r\nconnection: keep-alive\r\n\r\na")
    status, headers, _ = await answer(reader)
    assert status == 200 and headers["connection"] == "keep-alive"
    writer.write(b"POST / HTTP/1.0\r\ncontent-length: 1\r\n\r\nb")
    status, headers, _ = await answer(reader)
    assert status == 200 and headers["connection"] == "close" and await closed(reader)
    writer.close()


async def test_a_closed_connection_leaves_no_cycle_for_the_collector(served: Served) -> None:
    """The parser holds the protocol's bound methods: kept after the connection is lost, the
    pair and its transport are a cycle only the collector frees, once per connection."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        reader, writer = await connect(served.port)
        writer.write(post("/", b"abc"))
        assert (await answer(reader))[::2] == (200, b'{"size":3}')
        writer.close()
        await until(lambda: not served.server.connections.open)
        # the test's handler keeps what it was given
        served.app.requests.clear()
        served.app.answers.clear()
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert "HttpProtocol" not in left

"""`Http1Transport` against a replica that breaks HTTP/1.1 framing, over real loopback sockets.

Each test is a way a replica (an untrusted peer) misbehaves; the caller must get the right
reply or one of our errors, and the next request must get its own reply, never a stray one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamProtocolError, UpstreamTimeout
from gateway.upstream.transport.http1 import Http1Transport
from tests.gateway.upstream.scripted_server import HUGE, STALE, ScriptedServer, wait_until


@pytest.fixture
async def transport() -> AsyncIterator[Http1Transport]:
    built = Http1Transport()
    try:
        yield built
    finally:
        await built.aclose()


async def _post(transport: Http1Transport, endpoint: Endpoint, path: str, body: bytes) -> bytes:
    reply = await transport.request(endpoint, "POST", path, body=body, timeout=5.0)
    assert reply.status == 200
    return reply.body


# --- interim replies ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/continue", "/early-hints"])
async def test_interim_reply_is_skipped_and_the_next_request_gets_its_own(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint, path: str
) -> None:
    assert await _post(transport, endpoint, path, b"one") == b"one"
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"
    assert server.accepted == 1  # the interim left the connection in step: it was reused


# --- replies nobody asked for -------------------------------------------------------------------


async def test_unread_stray_reply_in_the_socket_is_never_the_next_reply(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    assert await _post(transport, endpoint, "/echo", b"one") == b"one"
    server.send_now(STALE)  # in the pooled connection's socket, not yet read by the loop
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"
    assert server.accepted == 2


async def test_stray_reply_after_a_reply_is_never_the_next_reply(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    assert await _post(transport, endpoint, "/extra-reply", b"one") == b"one"
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"


async def test_late_reply_after_a_timeout_is_never_the_next_reply(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    with pytest.raises(UpstreamTimeout):
        await transport.request(endpoint, "POST", "/late", body=b"one", timeout=0.1)
    server.release.set()
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"
    assert server.accepted == 2


async def test_a_late_reply_during_the_next_exchange_is_read_as_its_reply_when_kept_alive(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    """What no framing check can see (the V2 reply's id must catch it): the bytes are a
    well-framed reply, on the connection, while the next request waits for its own."""
    assert await _post(transport, endpoint, "/stale-first", b"one") == b"one"
    assert await _post(transport, endpoint, "/stale-first", b"two") == b"stale"
    assert server.accepted == 1


async def test_an_endpoint_not_kept_alive_gives_every_exchange_its_own_connection(
    transport: Http1Transport, server: ScriptedServer
) -> None:
    """For servers that echo no id: no connection carries a second exchange, so no late reply
    can be read as another request's; the server is asked to close, and nothing is pooled."""
    endpoint = Endpoint("127.0.0.1", server.port, keep_alive=False)
    for body in (b"one", b"two", b"three"):
        assert await _post(transport, endpoint, "/stale-first", body) == body
        assert server.last_headers.get("connection") == "close"
        assert transport.pooled(endpoint) == 0
    assert server.accepted == 3


# --- bodies that are not framed, cut short, or too big ------------------------------------------


async def test_2xx_delimited_by_the_close_is_refused(
    transport: Http1Transport, endpoint: Endpoint
) -> None:
    with pytest.raises(UpstreamProtocolError, match="neither Content-Length nor chunked"):
        await transport.request(endpoint, "GET", "/until-eof", timeout=5.0)


@pytest.mark.parametrize("path", ["/truncated", "/truncated-chunked"])
async def test_body_cut_short_is_refused(
    transport: Http1Transport, endpoint: Endpoint, path: str
) -> None:
    with pytest.raises(UpstreamProtocolError, match="mid-reply"):
        await transport.request(endpoint, "POST", path, body=b"x", timeout=5.0)


async def test_ten_thousand_repeated_headers_are_refused(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    with pytest.raises(UpstreamProtocolError, match="max_reply_header_count=100"):
        await transport.request(endpoint, "POST", "/many-headers", body=b"x", timeout=5.0)
    await wait_until(lambda: server.open_connections == 0)  # the connection was dropped
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"


@pytest.mark.parametrize("path", ["/huge-chunked", "/huge-length"])
async def test_huge_reply_is_refused_without_reading_it_all(
    server: ScriptedServer, endpoint: Endpoint, path: str
) -> None:
    transport = Http1Transport(max_reply_body_bytes=1 << 20)
    try:
        with pytest.raises(UpstreamProtocolError, match="max_reply_body_bytes=1048576"):
            await transport.request(endpoint, "POST", path, body=b"x", timeout=30.0)
        await wait_until(lambda: server.open_connections == 0, within_s=30.0)
    finally:
        await transport.aclose()
    # The client stopped reading at 1 MiB: the replica could send only what the sockets buffer.
    assert server.body_bytes_sent < HUGE // 2


# --- replies without a body ---------------------------------------------------------------------


async def test_204_without_body_completes_and_is_reused(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    reply = await transport.request(endpoint, "POST", "/no-content", body=b"x", timeout=5.0)
    assert (reply.status, reply.body) == (204, b"")
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"
    assert server.accepted == 1


async def test_reply_to_head_completes_without_its_body(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    reply = await transport.request(endpoint, "HEAD", "/head", timeout=5.0)
    assert (reply.status, reply.body, reply.headers["content-length"]) == (200, b"", "5")
    assert await _post(transport, endpoint, "/echo", b"two") == b"two"
    assert server.accepted == 2  # never reused after HEAD: httptools would wait for a body

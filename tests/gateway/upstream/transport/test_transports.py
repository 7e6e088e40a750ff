"""Contract tests run against the gateway's `Http1Transport` and, as references, the
library-backed transports that the benchmark compares it with (``loadtests/transports``), on
real loopback servers."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.http1 import Http1Transport, encode_request
from loadtests.transports import TRANSPORTS, TransportLimits, make_transport
from tests.gateway.upstream.scripted_server import CHUNKS, ScriptedServer, wait_until

BODY_10K = bytes(range(256)) * 40


@pytest.fixture(params=sorted(TRANSPORTS))
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def transport(name: str) -> AsyncIterator[Transport]:
    # connects as slow as a starved 2-core machine makes them (32 at once to a subprocess
    # took aiohttp past its 1 s default); a refused connect still fails at once
    built = make_transport(name, TransportLimits(connect_timeout_s=10.0))
    try:
        yield built
    finally:
        await built.aclose()


@pytest.fixture
def refused_endpoint() -> Iterator[Endpoint]:
    """A port that is bound but not listening: connecting is refused, and nobody can take it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield Endpoint("127.0.0.1", sock.getsockname()[1])


async def _echo(transport: Transport, endpoint: Endpoint, body: bytes = b"ping") -> None:
    reply = await transport.request(endpoint, "POST", "/echo", body=body, timeout=5.0)
    assert (reply.status, reply.body) == (200, body)


# --- the happy path, against uvicorn ---------------------------------------------------------


async def test_post_round_trips_status_headers_and_body(
    transport: Transport, uvicorn_endpoint: Endpoint
) -> None:
    reply = await transport.request(
        uvicorn_endpoint,
        "POST",
        "/v2/models/m/infer",
        body=BODY_10K,
        headers={"x-echo": "abc", "content-type": "application/json"},
        timeout=5.0,
    )
    assert reply.status == 200
    assert reply.body == BODY_10K
    assert reply.headers["x-echo"] == "abc"
    assert reply.headers["content-length"] == str(len(BODY_10K))
    assert all(key == key.lower() for key in reply.headers)


async def test_error_status_is_a_reply_not_an_exception(
    transport: Transport, uvicorn_endpoint: Endpoint
) -> None:
    reply = await transport.request(uvicorn_endpoint, "POST", "/status/503", body=b"x", timeout=5)
    assert (reply.status, reply.body) == (503, b"x")


async def test_get_without_body(transport: Transport, uvicorn_endpoint: Endpoint) -> None:
    reply = await transport.request(uvicorn_endpoint, "GET", "/v2/health/ready", timeout=5.0)
    assert (reply.status, reply.body) == (200, b"")


async def test_concurrent_requests_each_get_their_own_reply(
    transport: Transport, uvicorn_endpoint: Endpoint
) -> None:
    bodies = [f"request {i};".encode() * (i + 1) for i in range(32)]
    for _ in range(2):  # the second round runs on pooled connections
        replies = await asyncio.gather(
            *(
                transport.request(
                    uvicorn_endpoint,
                    "POST",
                    "/v2/models/m/infer",
                    body=body,
                    headers={"x-echo": str(i)},
                    timeout=10.0,
                )
                for i, body in enumerate(bodies)
            )
        )
        assert [r.body for r in replies] == bodies
        assert [r.headers["x-echo"] for r in replies] == [str(i) for i in range(32)]


# --- framing and keep-alive -------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    for i in range(10):
        await _echo(transport, endpoint, f"body {i}".encode())
    assert (server.accepted, server.requests) == (1, 10)


async def test_chunked_reply_is_decoded(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    reply = await transport.request(endpoint, "POST", "/chunked", body=b"x", timeout=5.0)
    assert (reply.status, reply.body) == (200, b"".join(CHUNKS))
    assert reply.headers["x-mixed-case"] == "Yes"
    await _echo(transport, endpoint)
    assert server.accepted == 1


async def test_header_names_are_lower_case_and_repeats_joined(
    transport: Transport, endpoint: Endpoint
) -> None:
    reply = await transport.request(endpoint, "POST", "/echo", body=b"x", timeout=5.0)
    assert reply.headers["x-mixed-case"] == "Yes"
    assert reply.headers["x-twice"] == "a, b"


async def test_request_head_is_lean_and_asks_for_no_compression(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    await transport.request(
        endpoint, "POST", "/echo", body=b"abc", headers={"x-echo": "1"}, timeout=5.0
    )
    sent = server.last_headers
    assert sent["host"] == f"127.0.0.1:{server.port}"
    assert (sent["content-length"], sent["x-echo"]) == ("3", "1")
    assert sent.get("accept-encoding", "identity") == "identity"
    assert "content-type" not in sent


async def test_junk_after_a_reply_is_never_read_as_the_next_reply(
    name: str, transport: Transport, endpoint: Endpoint, request: pytest.FixtureRequest
) -> None:
    if name == "httpx":
        reason = "httpcore pools the connection with the junk still in h11's buffer"
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    try:  # aiohttp and h11 reject the whole read, Http1Transport takes the complete reply
        reply = await transport.request(endpoint, "POST", "/trailing-junk", body=b"x", timeout=5)
        assert (reply.status, reply.body) == (200, b"ok")
    except UpstreamProtocolError:
        pass
    await _echo(transport, endpoint, b"next")


async def test_connection_close_is_honoured(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    for _ in range(3):
        reply = await transport.request(endpoint, "POST", "/close", body=b"x", timeout=5.0)
        assert (reply.status, reply.body) == (200, b"ok")
    assert server.accepted == 3


async def test_error_reply_delimited_by_close(transport: Transport, endpoint: Endpoint) -> None:
    reply = await transport.request(endpoint, "GET", "/until-eof-404", timeout=5.0)
    assert (reply.status, reply.body) == (404, b"until-eof")


async def test_idle_connection_closed_by_server_is_replaced(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    await transport.request(endpoint, "POST", "/close-after", body=b"x", timeout=5.0)
    await wait_until(lambda: server.open_connections == 0)
    await _echo(transport, endpoint)
    assert server.accepted == 2


async def test_stale_connection_is_retried_once_on_a_fresh_one(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    await _echo(transport, endpoint)
    reply = await transport.request(endpoint, "POST", "/drop-if-reused", body=b"y", timeout=5.0)
    assert (reply.status, reply.body) == (200, b"y")
    assert server.accepted == 2


# --- failures ---------------------------------------------------------------------------------


async def test_timeout_is_quick_and_the_pool_recovers(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout):
        await transport.request(endpoint, "POST", "/hang", body=b"x", timeout=0.2)
    assert 0.15 < time.monotonic() - started < 2.0
    await wait_until(lambda: server.open_connections == 0)  # the timed-out one is closed
    await _echo(transport, endpoint)


async def test_refused_connection(transport: Transport, refused_endpoint: Endpoint) -> None:
    with pytest.raises(UpstreamConnectError):
        await transport.request(refused_endpoint, "POST", "/echo", body=b"x", timeout=5.0)


async def test_garbage_reply(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    with pytest.raises(UpstreamProtocolError):
        await transport.request(endpoint, "POST", "/garbage", body=b"x", timeout=5.0)
    await wait_until(lambda: server.open_connections == 0)
    await _echo(transport, endpoint)


async def test_truncated_reply(transport: Transport, endpoint: Endpoint) -> None:
    with pytest.raises(UpstreamProtocolError):
        await transport.request(endpoint, "POST", "/truncated", body=b"x", timeout=5.0)


async def test_closed_before_reply(transport: Transport, endpoint: Endpoint) -> None:
    with pytest.raises(UpstreamConnectError):
        await transport.request(endpoint, "POST", "/drop", body=b"x", timeout=5.0)


async def test_cancellation_propagates_and_leaves_the_pool_usable(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    await _echo(transport, endpoint)  # the hanging request below runs on a pooled connection
    hanging = asyncio.create_task(
        transport.request(endpoint, "POST", "/hang", body=b"x", timeout=30.0)
    )
    await wait_until(lambda: server.requests == 2)
    hanging.cancel()
    with pytest.raises(asyncio.CancelledError):
        await hanging
    await wait_until(lambda: server.open_connections == 0)  # the half-used one is closed
    await _echo(transport, endpoint)


# --- limits and closing -----------------------------------------------------------------------


async def test_connections_per_endpoint_are_bounded(
    name: str, server: ScriptedServer, endpoint: Endpoint
) -> None:
    transport = make_transport(
        name, TransportLimits(max_connections_per_endpoint=2, connect_timeout_s=10.0)
    )
    try:
        await asyncio.gather(*(_echo(transport, endpoint, b"%d" % i) for i in range(8)))
    finally:
        await transport.aclose()
    assert 1 <= server.accepted <= 2


async def test_waiting_for_a_free_connection_is_bounded_by_the_timeout(
    name: str, server: ScriptedServer, endpoint: Endpoint
) -> None:
    transport = make_transport(
        name, TransportLimits(max_connections_per_endpoint=1, connect_timeout_s=10.0)
    )
    hanging = asyncio.create_task(
        transport.request(endpoint, "POST", "/hang", body=b"x", timeout=30.0)
    )
    try:
        await wait_until(lambda: server.requests == 1)
        with pytest.raises(UpstreamTimeout):
            await transport.request(endpoint, "POST", "/echo", body=b"x", timeout=0.2)
    finally:
        hanging.cancel()
        await asyncio.gather(hanging, return_exceptions=True)
        await transport.aclose()


async def test_aclose_closes_every_connection(
    transport: Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    await asyncio.gather(*(_echo(transport, endpoint) for _ in range(4)))
    assert server.open_connections >= 1
    await transport.aclose()
    await wait_until(lambda: server.open_connections == 0)


# --- Http1Transport specifics ------------------------------------------------------------------


async def test_fast_errors_name_no_address(
    refused_endpoint: Endpoint, server: ScriptedServer, endpoint: Endpoint
) -> None:
    """A client may read how the last attempt failed: the attempt names the replica by id, the
    transport's message never says where it listens (the socket layer's text does)."""
    transport = Http1Transport(max_connections_per_endpoint=1)
    hanging = asyncio.create_task(
        transport.request(endpoint, "POST", "/hang", body=b"x", timeout=30.0)
    )
    try:
        with pytest.raises(UpstreamConnectError) as refused:
            await transport.request(refused_endpoint, "POST", "/echo", body=b"x", timeout=5.0)
        assert refused.value.message == "cannot connect: Connection refused"
        await wait_until(lambda: server.requests == 1)
        with pytest.raises(UpstreamTimeout) as busy:
            await transport.request(endpoint, "POST", "/echo", body=b"x", timeout=0.2)
        assert busy.value.message == "no free connection in time (all busy)"
    finally:
        hanging.cancel()
        await asyncio.gather(hanging, return_exceptions=True)
        await transport.aclose()


async def test_fast_does_not_retry_a_fresh_connection(
    server: ScriptedServer, endpoint: Endpoint
) -> None:
    transport = Http1Transport()
    with pytest.raises(UpstreamConnectError):
        await transport.request(endpoint, "POST", "/drop", body=b"x", timeout=5.0)
    await transport.aclose()
    assert server.accepted == 1


async def test_fast_keeps_at_most_max_idle_connections(
    server: ScriptedServer, endpoint: Endpoint
) -> None:
    transport = Http1Transport(max_idle_per_endpoint=2)
    try:
        await asyncio.gather(*(_echo(transport, endpoint) for _ in range(8)))
        assert server.accepted == 8  # all eight were in flight at once
        await wait_until(lambda: server.open_connections == 2)
    finally:
        await transport.aclose()


async def test_fast_forget_closes_a_departed_endpoints_idle_connections(
    server: ScriptedServer, endpoint: Endpoint
) -> None:
    transport = Http1Transport()
    try:
        await asyncio.gather(*(_echo(transport, endpoint) for _ in range(3)))
        assert transport.pooled(endpoint) == 3
        transport.forget(endpoint)
        assert transport.pooled(endpoint) == 0
        await wait_until(lambda: server.open_connections == 0)  # closed, not left to age out
        await _echo(transport, endpoint)  # the replica came back: used afresh, and pooled
        assert transport.pooled(endpoint) == 1
    finally:
        await transport.aclose()


async def test_fast_forget_closes_an_exchange_in_flight_once_it_ends(
    server: ScriptedServer, endpoint: Endpoint
) -> None:
    """An exchange to a departed endpoint finishes, then its connection is closed, not kept."""
    transport = Http1Transport()
    try:
        late = asyncio.create_task(
            transport.request(endpoint, "POST", "/late", body=b"x", timeout=5.0)
        )
        await wait_until(lambda: server.requests == 1)
        transport.forget(endpoint)
        server.release.set()
        reply = await late
        assert (reply.status, reply.body) == (200, b"late")
        assert transport.pooled(endpoint) == 0
        await wait_until(lambda: server.open_connections == 0)
    finally:
        await transport.aclose()


async def test_fast_refuses_a_2xx_reply_delimited_by_close(endpoint: Endpoint) -> None:
    """Framed by the close alone, a cut-short 2xx would pass for a whole one (aiohttp and httpx
    accept it)."""
    transport = Http1Transport()
    try:
        with pytest.raises(UpstreamProtocolError, match="neither Content-Length nor chunked"):
            await transport.request(endpoint, "GET", "/until-eof", timeout=5.0)
    finally:
        await transport.aclose()


async def test_fast_refuses_header_injection(endpoint: Endpoint) -> None:
    transport = Http1Transport()
    with pytest.raises(ValueError, match="CR or LF"):
        await transport.request(
            endpoint, "POST", "/echo", headers={"x-a": "1\r\nx-b: 2"}, timeout=1.0
        )


@pytest.mark.parametrize("path", ["/a\r\nx-b: 2", "/a\nx-b: 2", "/a\rb"])
def test_refuses_a_line_break_in_the_request_line(path: str) -> None:
    with pytest.raises(ValueError, match="CR or LF"):
        encode_request(Endpoint("127.0.0.1", 80), "POST", path, b"{}", None)


@pytest.mark.parametrize("name", ["x-a\r\nx-b", "x-a\n"])
def test_refuses_a_line_break_in_a_header_name(name: str) -> None:
    with pytest.raises(ValueError, match="CR or LF"):
        encode_request(Endpoint("127.0.0.1", 80), "POST", "/a", b"{}", {name: "1"})


def test_an_endpoint_whose_host_breaks_a_line_is_refused() -> None:
    """Its part of every head is checked once, where it is built."""
    with pytest.raises(ValueError, match="CR or LF"):
        Endpoint("a\r\nx-b: 2", 80)


# --- names ------------------------------------------------------------------------------------


def test_each_transport_carries_its_name(name: str) -> None:
    assert make_transport(name).name == name

"""The server as a worker starts and stops it: a given socket or SO_REUSEPORT, and the drain."""

from __future__ import annotations

import asyncio
import socket

import orjson

from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.server import HttpServer
from tests.gateway.worker.http.served import (
    WAIT_S,
    App,
    answer,
    closed,
    connect,
    post,
    serve,
    until,
    within,
)

LIMITS = ClientLimits(header_timeout_s=5.0, keep_alive_s=5.0, min_body_rate=0)


async def test_it_serves_on_a_socket_it_is_given() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = HttpServer(App().router(), LIMITS)
    await server.start(sock=sock)
    reader, writer = await connect(sock.getsockname()[1])
    writer.write(post("/", b"abc"))
    assert (await answer(reader))[::2] == (200, b'{"size":3}')
    writer.close()
    assert await within(server.drain(1.0))


async def test_two_servers_share_a_port_with_reuse_port() -> None:
    first = HttpServer(App().router(), LIMITS)
    await first.start(host="127.0.0.1", port=0, reuse_port=True)
    second = HttpServer(App().router(), LIMITS)
    await second.start(host="127.0.0.1", port=first.port, reuse_port=True)
    assert second.port == first.port
    for server in (first, second):
        assert await within(server.drain(1.0))


async def test_a_drain_closes_idle_connections_finishes_answers_and_refuses_new_ones() -> None:
    app = App()
    server = await serve(LIMITS, app.router())
    idle_reader, idle_writer = await connect(server.port)
    idle_writer.write(post("/", b"a"))
    assert (await answer(idle_reader))[0] == 200  # kept alive, now idle
    busy_reader, busy_writer = await connect(server.port)
    busy_writer.write(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
    await until(lambda: {"slow": "started"} in app.seen)
    draining = asyncio.create_task(server.drain(WAIT_S))
    assert await closed(idle_reader)  # at once: nothing in flight there
    try:
        await asyncio.open_connection("127.0.0.1", server.port)
        raise AssertionError("a draining server accepted a connection")
    except OSError:
        pass
    app.release.set()
    status, headers, body = await answer(busy_reader)
    assert (status, body) == (200, b'{"slow":true}') and headers["connection"] == "close"
    assert await closed(busy_reader)
    assert await within(draining) is True
    idle_writer.close()
    busy_writer.close()


async def test_what_does_not_finish_within_the_grace_is_cut_and_its_handler_cancelled() -> None:
    app = App()
    server = await serve(LIMITS, app.router())
    reader, writer = await connect(server.port)
    writer.write(post("/listen", b"x"))
    await until(lambda: {"listening": True} in app.seen)
    assert await within(server.drain(0.2)) is False
    assert await closed(reader)
    await until(lambda: {"cancelled": True} in app.seen)
    writer.close()


async def test_connections_over_the_cap_or_a_peers_share_get_a_json_503() -> None:
    limits = ClientLimits(max_connections=3, max_connections_per_peer=2, min_body_rate=0)
    server = await serve(limits, App().router())
    kept = [await connect(server.port) for _ in range(2)]
    await until(lambda: len(server.connections.open) == 2)
    reader, writer = await connect(server.port)  # a third from 127.0.0.1
    status, headers, body = await answer(reader)
    assert (status, headers["connection"]) == (503, "close")
    assert orjson.loads(body) == {"error": "too many connections from 127.0.0.1 (at most 2)"}
    assert await closed(reader)
    writer.close()
    other = socket.socket()
    other.bind(("127.0.0.2", 0))  # another peer still gets in, up to the cap
    other.setblocking(False)
    await asyncio.get_running_loop().sock_connect(other, ("127.0.0.1", server.port))
    other_reader, other_writer = await asyncio.open_connection(sock=other)
    await until(lambda: len(server.connections.open) == 3)
    other_writer.write(post("/", b"ok"))
    assert (await answer(other_reader))[0] == 200
    reader, writer = await connect(server.port)
    status, _, body = await answer(reader)
    assert status == 503 and orjson.loads(body) == {"error": "too many connections (at most 3)"}
    writer.close()
    kept[0][1].close()
    await until(lambda: len(server.connections.open) == 2)
    reader, writer = await connect(server.port)  # room again
    writer.write(post("/", b"ok"))
    assert (await answer(reader))[0] == 200
    assert server.connections.refusals[503] == 2
    for _, kept_writer in [*kept, (other_reader, other_writer), (reader, writer)]:
        kept_writer.close()
    await within(server.drain(1.0))

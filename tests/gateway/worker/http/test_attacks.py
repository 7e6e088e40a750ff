"""Issue 37's attacks on the HTTP server, each as a test: what one client can take is bounded.

- bodies declared and never sent hold only what arrived (`HttpServer.held`, `Request.received`);
- a chunk extension that never ends counts toward ``max_body_bytes`` (413, bounded reading);
- a body trickled below the minimum rate is cut (408);
- pipelined requests wait at most ``max_pipelined`` (+1) parsed; the rest is not read;
- an answer the client never reads is known unsent, and the connection is dropped after the
  write timeout;
- eight connections pipelining 100,000 requests each and never reading leave a real server
  process's RSS within 64 MB of where it was, and another client is still served.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import orjson
import pytest

from gateway.worker.http.limits import ClientLimits
from tests.gateway.worker.http.served import (
    WAIT_S,
    App,
    answer,
    connect,
    serve,
    until,
    within,
)
from tests.support.processes import REPO_ROOT, free_port

MIB = 1024 * 1024


async def test_declared_bodies_that_never_come_hold_only_what_arrived() -> None:
    app = App()
    server = await serve(ClientLimits(min_body_rate=0, max_body_bytes=64 * MIB), app.router())
    writers = []
    for _ in range(8):
        _, writer = await connect(server.port)
        writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % (16 * MIB))
        writer.write(b"x" * 100)
        writers.append(writer)
    await until(lambda: [r.received for r in app.requests] == [100] * 8)
    assert server.held() <= 800  # what arrived, in the handlers' hands or waiting for them
    for writer in writers:
        writer.close()


async def test_a_chunk_extension_that_never_ends_counts_toward_the_body_cap() -> None:
    server = await serve(ClientLimits(min_body_rate=0, max_body_bytes=MIB), App().router())
    _, writer = await connect(server.port)
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n5;ext=")
    sent = 0
    with pytest.raises(ConnectionError):
        async with asyncio.timeout(WAIT_S):
            while sent < 64 * MIB:
                writer.write(b"a" * 65536)
                await writer.drain()
                sent += 65536
    assert sent < 8 * MIB  # the cap, a read or two, and the linger
    assert server.connections.refusals == {413: 1}
    writer.close()


async def test_a_body_slower_than_the_minimum_rate_is_cut_with_408() -> None:
    limits = ClientLimits(min_body_rate=1000, body_rate_grace_s=0.2, body_timeout_s=30)
    app = App()
    server = await serve(limits, app.router())
    reader, writer = await connect(server.port)
    writer.write(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 100000\r\n\r\n" + b"x" * 100)

    async def trickle() -> None:
        while True:
            await asyncio.sleep(0.05)
            writer.write(b"x")  # 20 bytes a second

    trickling = asyncio.create_task(trickle())
    status, _, body = await answer(reader)
    trickling.cancel()
    assert status == 408
    assert orjson.loads(body) == {"error": "request body slower than 1000 bytes/s"}
    await until(lambda: app.seen)
    assert app.seen[0]["error"] == 408  # the handler's read was told
    writer.close()
    await within(server.drain(1.0))


async def test_pipelined_requests_wait_bounded_and_the_rest_is_not_read() -> None:
    app = App()
    server = await serve(ClientLimits(min_body_rate=0, max_pipelined=4), app.router())
    reader, writer = await connect(server.port)
    request = b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n"
    writer.write(request * 10_000)  # 310 KB in one go: more than one read
    await until(lambda: app.seen and server.connections.open)
    (conn,) = server.connections.open
    await until(lambda: conn._pauses)  # type: ignore[attr-defined]
    assert len(conn._queue) <= 5  # type: ignore[attr-defined]
    assert server.held() <= 256 * 1024 + len(request) * 10
    app.release.set()
    for _ in range(10_000):
        assert (await answer(reader))[0] == 200
    writer.close()
    await within(server.drain(1.0))


async def test_an_answer_never_read_is_known_unsent_and_its_connection_dropped() -> None:
    app = App()
    limits = ClientLimits(min_body_rate=0, write_timeout_s=0.3, keep_alive_s=30)
    server = await serve(limits, app.router())
    _, writer = await connect(server.port)
    writer.write(b"GET /big/%d HTTP/1.1\r\nhost: t\r\n\r\n" % (32 * MIB))  # never read
    await until(lambda: app.answers)
    (unread,) = app.answers
    assert unread.flushed is None and server.held() > 0  # in the transport, not sent
    assert await within(unread.wait_flushed()) is False
    await until(lambda: not server.connections.open)  # dropped, its buffer with it
    assert server.held() == 0
    reader, writer = await connect(server.port)
    writer.write(b"GET /big/300000 HTTP/1.1\r\nhost: t\r\n\r\n")
    assert len((await answer(reader))[2]) == 300_000
    assert await within(app.answers[-1].wait_flushed()) is True  # read: sent
    writer.close()
    await within(server.drain(1.0))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.integration
async def test_eight_never_reading_pipelining_connections_leave_a_server_rss_bounded() -> None:
    port = free_port()
    script = str(REPO_ROOT / "loadtests" / "lean_floor.py")
    server = await asyncio.create_subprocess_exec(
        sys.executable, script, "--port", str(port), cwd=REPO_ROOT
    )
    try:
        await _until_listening(port)
        baseline = rss_bytes(server.pid)
        flood = b"GET /ready HTTP/1.1\r\nhost: t\r\n\r\n" * 100_000
        writers = []
        for _ in range(8):
            _, writer = await connect(port)
            writer.write(flood)  # never read, never drained: the test holds what is not sent
            writers.append(writer)
        await _until_settled(server.pid)
        assert rss_bytes(server.pid) <= baseline + 64 * MIB
        reader, writer = await connect(port)  # another client is served meanwhile
        writer.write(b"GET /ready HTTP/1.1\r\nhost: t\r\n\r\n")
        assert (await answer(reader))[0] == 200
        for flooding in [*writers, writer]:
            flooding.transport.abort()
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), WAIT_S)


async def _until_listening(port: int) -> None:
    for _ in range(int(WAIT_S * 3 / 0.05)):
        try:
            await connect(port)
        except OSError:
            await asyncio.sleep(0.05)
        else:
            return
    raise TimeoutError("the server did not listen")


async def _until_settled(pid: int) -> None:
    """Until the server's CPU time stops moving (it has read all it will), bounded."""
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    last = cpu()
    for _ in range(int(WAIT_S * 3 / 0.5)):
        await asyncio.sleep(0.5)
        now = cpu()
        if now - last < 0.02:
            return
        last = now
    raise TimeoutError("the server kept working")

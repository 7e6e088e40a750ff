from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from pathlib import Path

import pytest
import uvloop

from gateway.config.endpoint import Endpoint
from tests.gateway.upstream.scripted_server import ScriptedServer

ECHO_APP = Path(__file__).with_name("echo_app.py")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The transport tests run on both loops the gateway supports; other tests as before."""
    if item.path.name not in ("test_transports.py", "test_tls.py"):
        return {"asyncio": asyncio.new_event_loop}
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer()
    await scripted.start()
    try:
        yield scripted
    finally:
        await scripted.stop()


@pytest.fixture
def endpoint(server: ScriptedServer) -> Endpoint:
    return Endpoint("127.0.0.1", server.port)


@pytest.fixture(scope="module")
def uvicorn_endpoint() -> Iterator[Endpoint]:
    """A uvicorn echo server in a subprocess, on a socket bound here (so no port race)."""
    with echo_server() as port:
        yield Endpoint("127.0.0.1", port)


@contextlib.contextmanager
def echo_server(*tls: str, context: ssl.SSLContext | None = None) -> Iterator[int]:
    """`echo_app` on a free port, with ``tls`` its certificate arguments; yields the port once
    it answers (over TLS with ``context``)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(ECHO_APP), str(sock.fileno()), *tls], pass_fds=[sock.fileno()]
    )
    sock.close()
    try:
        _wait_ready(port, context=context)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _wait_ready(port: int, within_s: float = 30.0, context: ssl.SSLContext | None = None) -> None:
    """Block until the server answers: the bound socket queues our request until uvicorn
    accepts it, and if the child dies the socket closes and the request fails at once."""
    conn = (
        http.client.HTTPConnection("127.0.0.1", port, timeout=within_s)
        if context is None
        else http.client.HTTPSConnection("127.0.0.1", port, timeout=within_s, context=context)
    )
    try:
        conn.request("GET", "/ready")
        assert conn.getresponse().status == 200
    finally:
        conn.close()

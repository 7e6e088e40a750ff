from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace

import pytest
import uvloop

from gateway.worker.http.limits import ClientLimits
from gateway.worker.http.server import HttpServer
from tests.gateway.worker.http.served import App, clean_up, serve

LIMITS = ClientLimits(
    max_header_bytes=4096,
    header_timeout_s=0.5,
    body_timeout_s=0.5,
    keep_alive_s=1.0,
    min_body_rate=0,
)
# Tests not about time: a starved machine (CI under xdist) can stall a loop past 0.5 s between
# a connect and its first read, and a 408 there is the machine's, not the server's.
PATIENT = replace(LIMITS, header_timeout_s=30.0, body_timeout_s=30.0, keep_alive_s=30.0)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The server runs on uvloop (the gateway's loop); the ported behaviours on asyncio's too."""
    if item.path.name == "test_protocol.py":
        return {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop}


@dataclass
class Served:
    app: App
    server: HttpServer

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture(autouse=True)
async def cleaned_up() -> AsyncIterator[None]:
    yield
    await clean_up()


@pytest.fixture
async def served(cleaned_up: None) -> AsyncIterator[Served]:
    """A server whose timeouts a stalled test machine cannot reach."""
    app = App()
    server = await serve(PATIENT, app.router())
    yield Served(app, server)


@pytest.fixture
async def timed(cleaned_up: None) -> AsyncIterator[Served]:
    """A server with half-second timeouts, for the tests about them."""
    app = App()
    server = await serve(LIMITS, app.router())
    yield Served(app, server)

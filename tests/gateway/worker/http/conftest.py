from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass

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
    app = App()
    server = await serve(LIMITS, app.router())
    yield Served(app, server)

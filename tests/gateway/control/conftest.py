"""The real-process tests of the supervisor and the standby run on both loops the gateway
supports: a worker's exit is seen by the loop's own child watching (libuv's on uvloop,
asyncio's watcher otherwise)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name not in ("test_workers.py", "test_standby.py"):
        return {"asyncio": asyncio.new_event_loop}
    return {"uvloop": uvloop.new_event_loop, "asyncio": asyncio.new_event_loop}

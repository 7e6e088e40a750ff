"""``/admin/history`` (the dashboard's charts and timeline) on a real `Gateway` app.

The page itself and its files: tests/gateway/api/dashboard.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from tests.gateway.fakes import FakeTransport, reply

REQUEST = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0] * 64}]}
CONFIG = {
    "pools": {"p": {"model": "m", "replicas": [{"id": "r0", "url": "http://127.0.0.1:9000"}]}},
    "models": {
        "digits": {
            "pool": "p",
            "slos": [{"name": "availability", "kind": "availability", "objective": 0.99}],
        }
    },
}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    transport = FakeTransport({"127.0.0.1:9000": reply(200)})
    gateway = Gateway(parse_config(CONFIG), transport=transport, rng=random.Random(1))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    yield gateway
    await gateway.stop()


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    asgi = httpx.ASGITransport(app=GatewayApp(gateway))
    async with httpx.AsyncClient(transport=asgi, base_url="http://localhost") as http:
        yield http


async def test_history_document_after_traffic(client: httpx.AsyncClient, gateway: Gateway) -> None:
    for _ in range(3):
        await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
    gateway.history.sample()
    gateway.history.record_event("reload", "config", "by hand", "info")
    doc = (await client.get("/admin/history")).json()
    # The gateway's own once-a-second sampler may add a row beside the one taken here (a slow
    # machine), so the rows are counted as at least one and the traffic is in one of them.
    rows = len(doc["t"])
    assert doc["interval_s"] == 1.0 and doc["capacity_s"] == 600.0
    assert rows >= 1 and max(doc["models"]["digits"]["rate"]) > 0
    # a row the sampler took before any traffic has no share (None), never an error
    shares = doc["models"]["digits"]["error_share"]
    assert 0.0 in shares and set(shares) <= {0.0, None}
    assert set(doc["models"]["digits"]["slo"]) == {"availability"}
    # the row taken here counts the healthy replica (one the sampler took at start may not)
    assert doc["pools"]["p"]["healthy"][-1] == 1
    assert doc["events"][0]["kind"] == "reload" and doc["event_counts"] == {"reload": 1}
    assert set(doc["replicas"]) == {"r0"}
    limited = (await client.get("/admin/history", params={"seconds": 60, "events": 0})).json()
    assert limited["events"] == [] and len(limited["t"]) >= rows
    refused = await client.get("/admin/history", params={"seconds": 0})
    assert refused.status_code == 400 and "seconds" in refused.json()["error"]

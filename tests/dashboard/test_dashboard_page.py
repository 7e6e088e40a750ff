"""The dashboard page and ``/admin/history`` on a real `Gateway` app over a scripted upstream."""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.runtime import Gateway
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


async def test_status_and_dashboard_are_one_self_contained_page(client: httpx.AsyncClient) -> None:
    status, dashboard = await client.get("/status"), await client.get("/dashboard")
    assert status.status_code == dashboard.status_code == 200
    assert status.text == dashboard.text
    assert status.headers["content-type"].startswith("text/html")
    assert status.headers["cache-control"] == "no-store"
    csp = status.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    page = status.text
    # nothing loaded from elsewhere: no src/href but the inline data: icon, no URL at all
    assert re.findall(r"\b(?:src|href)\s*=\s*['\"]([^'\"]*)", page) == ["data:,"]
    assert "http://" not in page and "https://" not in page and "//cdn" not in page
    for endpoint in ("/admin/state", "/admin/history", "/slo"):
        assert endpoint in page
    assert "True" not in page and "False" not in page  # words, not Python's booleans


async def test_history_document_after_traffic(client: httpx.AsyncClient, gateway: Gateway) -> None:
    for _ in range(3):
        await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
    gateway.history.sample()
    gateway.history.record_event("reload", "config", "by hand", "info")
    doc = (await client.get("/admin/history")).json()
    assert doc["interval_s"] == 1.0 and doc["capacity_s"] == 600.0
    assert len(doc["t"]) == 1 and doc["models"]["digits"]["rate"][0] > 0
    assert doc["models"]["digits"]["error_share"] == [0.0]
    assert set(doc["models"]["digits"]["slo"]) == {"availability"}
    assert doc["pools"]["p"]["healthy"] == [1]
    assert doc["events"][0]["kind"] == "reload" and doc["event_counts"] == {"reload": 1}
    assert set(doc["replicas"]) == {"r0"}
    limited = (await client.get("/admin/history", params={"seconds": 60, "events": 0})).json()
    assert limited["events"] == [] and len(limited["t"]) == 1
    refused = await client.get("/admin/history", params={"seconds": 0})
    assert refused.status_code == 400 and "seconds" in refused.json()["error"]

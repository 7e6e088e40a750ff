"""Traces, metrics and the SLO document of a real `Gateway` app on a scripted upstream."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.memory.inflight_bytes import machine_default
from gateway.telemetry.tracing import Tracer
from tests.gateway.fakes import FakeTransport, reply

REQUEST = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0] * 64}]}
OK = b'{"model_name": "m", "outputs": []}'
CONFIG = {
    "pools": {
        "p": {
            "model": "m",
            "replicas": [
                {"id": "bad", "url": "http://127.0.0.1:9000"},
                {"id": "good", "url": "http://127.0.0.1:9001"},
            ],
        }
    },
    "models": {
        "digits": {
            "pool": "p",
            "slos": [{"name": "availability", "kind": "availability", "objective": 0.99}],
        }
    },
}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def gateway(exporter: InMemorySpanExporter) -> AsyncIterator[Gateway]:
    transport = FakeTransport({"127.0.0.1:9000": reply(500), "127.0.0.1:9001": reply(200, OK)})
    gateway = Gateway(
        parse_config(CONFIG),
        transport=transport,
        rng=random.Random(1),
        tracer=Tracer(exporter=exporter),
    )
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


async def test_a_retried_request_traces_both_attempts_as_children(
    gateway: Gateway, client: httpx.AsyncClient, exporter: InMemorySpanExporter
) -> None:
    [good] = [r for r in gateway.registry.replicas() if r.id == "good"]
    good.outstanding = 50  # P2C tries the failing replica first, so this very request retries
    retried = await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
    assert retried.status_code == 200 and retried.headers["x-attempts"] == "2"
    trace_id = int(retried.headers["traceparent"].split("-")[1], 16)
    spans = [
        s for s in exporter.get_finished_spans() if s.context and s.context.trace_id == trace_id
    ]
    [request] = [s for s in spans if s.name == "infer"]
    attempts = sorted((s for s in spans if s.name == "attempt"), key=lambda s: s.start_time or 0)
    assert [a.attributes["gateway.replica"] for a in attempts] == ["bad", "good"]  # type: ignore[index]
    assert [a.attributes["gateway.outcome"] for a in attempts] == ["server_error", "success"]  # type: ignore[index]
    assert all(
        a.parent is not None and a.parent.span_id == request.context.span_id for a in attempts
    )


async def test_an_incoming_traceparent_is_continued_and_echoed(client: httpx.AsyncClient) -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    response = await client.post(
        "/v2/models/digits/infer", content=orjson.dumps(REQUEST), headers={"traceparent": parent}
    )
    assert response.headers["traceparent"].split("-")[1] == "0af7651916cd43dd8448eb211c80319c"


async def test_metrics_and_slo_document(client: httpx.AsyncClient) -> None:
    for _ in range(5):
        await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
    await client.post("/v2/models/nope/infer", content=orjson.dumps(REQUEST))
    text = (await client.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = families["gateway_requests"].samples
    ok = sum(
        s.value for s in requests if s.labels.get("model") == "digits" and s.name.endswith("_total")
    )
    assert ok == 5
    assert "gateway_upstream_attempts" in families and "gateway_breaker_state" in families
    assert "gateway_slo_error_budget_remaining" in families
    # served here, not by workers: this app's own in-flight bytes, all given back
    limit = families["gateway_inflight_bytes_limit"].samples[0].value
    assert limit == (parse_config(CONFIG).server.inflight_bytes or machine_default())
    assert families["gateway_inflight_bytes"].samples[0].value == 0
    slo = (await client.get("/slo")).json()
    entry = slo["models"]["digits"]["slos"][0]
    assert entry["events"]["total"] == 5 and entry["events"]["good"] == 5
    assert {"5m", "30m", "1h", "6h", "1d", "3d"} <= set(entry["burn_rates"])


async def test_status_page_for_people(client: httpx.AsyncClient) -> None:
    """The dashboard (tests/dashboard, tests/gateway/api/dashboard): a page whose scripts draw
    /admin/state, /admin/history, /slo."""
    page = await client.get("/status")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "v2-gateway" in page.text
    script = await client.get("/dashboard/dashboard.js")
    assert script.status_code == 200 and f'src="{script.url.path}"' in page.text
    for text in ("/admin/state", "/admin/history", "/slo"):
        assert text in script.text

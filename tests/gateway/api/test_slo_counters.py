"""The SLO event counters on /metrics of a real `Gateway` app: what the generated rules read.

Each SLO exports this instance's events and bad events since start as counters (the /slo
document's windows hold every instance's events, so they cannot be summed by Prometheus);
short-deadline requests stay out of both, a latency SLO counts late answers as bad.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.slo.rules import SliSeries, rule_groups
from gateway.telemetry.catalog import SLO, SloFamilies
from tests.gateway.fakes import FakeTransport, reply

REQUEST = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0] * 64}]}
)
OK = b'{"model_name": "m", "outputs": []}'
CONFIG = {
    "pools": {
        "p": {"model": "m", "replicas": [{"id": "good", "url": "http://127.0.0.1:9001"}]},
        "q": {"model": "m", "replicas": [{"id": "bad", "url": "http://127.0.0.1:9000"}]},
    },
    "models": {
        "digits": {
            "pool": "p",
            "slos": [
                {"name": "availability", "kind": "availability", "objective": 0.99},
                # no answer comes back within a microsecond: every counted event is late
                {
                    "name": "instant",
                    "kind": "latency",
                    "objective": 0.9,
                    "threshold_ms": 0.001,
                    "min_deadline_ms": 100,
                },
            ],
        },
        "broken": {
            "pool": "q",
            "slos": [{"name": "availability", "kind": "availability", "objective": 0.99}],
        },
    },
}


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = FakeTransport({"127.0.0.1:9000": reply(500), "127.0.0.1:9001": reply(200, OK)})
    gateway = Gateway(parse_config(CONFIG), transport=transport, rng=random.Random(1))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    try:
        asgi = httpx.ASGITransport(app=GatewayApp(gateway))
        async with httpx.AsyncClient(transport=asgi, base_url="http://localhost") as http:
            yield http
    finally:
        await gateway.stop()


async def _counters(client: httpx.AsyncClient) -> dict[tuple[str, str, str, str], float]:
    text = (await client.get("/metrics")).text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in ("gateway_slo_events_total", "gateway_slo_bad_events_total"):
                labels = (s.labels["model"], s.labels["slo"], s.labels["tenant"])
                assert set(s.labels) == set(SLO)
                out[(s.name, *labels)] = s.value
    return out


async def test_each_slo_exports_its_events_and_bad_events_as_counters(
    client: httpx.AsyncClient,
) -> None:
    for _ in range(3):
        assert (await client.post("/v2/models/digits/infer", content=REQUEST)).status_code == 200
    short = {"x-request-timeout-ms": "50"}  # under the 100 ms floor: the client's choice
    await client.post("/v2/models/digits/infer", content=REQUEST, headers=short)
    for _ in range(2):
        assert (await client.post("/v2/models/broken/infer", content=REQUEST)).status_code >= 500
    counters = await _counters(client)
    assert counters == {
        ("gateway_slo_events_total", "digits", "availability", ""): 3,
        ("gateway_slo_bad_events_total", "digits", "availability", ""): 0,
        ("gateway_slo_events_total", "digits", "instant", ""): 3,
        ("gateway_slo_bad_events_total", "digits", "instant", ""): 3,
        ("gateway_slo_events_total", "broken", "availability", ""): 2,
        ("gateway_slo_bad_events_total", "broken", "availability", ""): 2,
    }
    await client.post("/v2/models/broken/infer", content=REQUEST)
    later = await _counters(client)  # counters: they only grow, scrape after scrape
    assert later[("gateway_slo_events_total", "broken", "availability", "")] == 3


def test_the_rules_select_the_exported_counters_by_their_names_and_labels() -> None:
    names = SloFamilies()
    sli = SliSeries(names.events.name, names.bad_events.name, SLO)
    config = parse_config(CONFIG)
    (group, *_) = rule_groups({"digits": config.models["digits"].slos}, sli)
    five = group["rules"][0]["expr"]
    for name in ("gateway_slo_events_total", "gateway_slo_bad_events_total"):
        assert f'{name}{{model="digits",slo="availability",tenant=""}}[5m]' in five

"""One view of the fleet: real gateways on one real redis-server see each other in
``/admin/fleet`` (alive, then stale once one stops), with every replica's verdict from each;
a gateway without Redis says it shows itself only."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.gateway import pool_config
from tests.support.processes import wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration
SEEN_WITHIN_S = 10.0  # a heartbeat every 2 s, a pull every 0.2 s: well inside this


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


def fleet(url: str) -> dict[str, Any]:
    answer = httpx.get(url + "/admin/fleet", trust_env=False, timeout=5)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def alive(url: str) -> dict[str, bool]:
    return {i["instance"]: i["alive"] for i in fleet(url)["instances"]}


def both_alive(url: str) -> bool:
    return alive(url) == {"gw-a": True, "gw-b": True}


def test_two_gateways_on_one_redis_see_each_other(
    start_replicas: StartReplicas, start_gw: StartGateway, redis: RedisServer
) -> None:
    replicas = start_replicas(2)
    gateways = {}
    for name in ("gw-a", "gw-b"):
        config = pool_config(replicas)
        config["state"] = {
            "backend": "redis",
            "redis_url": redis.url,
            "instance": name,
            "namespace": "fleet",
            "sync_interval_s": 0.2,
        }
        gateways[name] = start_gw(config)
    a, b = gateways["gw-a"], gateways["gw-b"]
    started = time.monotonic()
    wait_until(
        lambda: both_alive(a.url),
        SEEN_WITHIN_S,
        message=lambda: f"A to list both gateways: {fleet(a.url)}",
    )
    wait_until(
        lambda: both_alive(b.url),
        SEEN_WITHIN_S,
        message=lambda: f"B to list both gateways: {fleet(b.url)}",
    )
    print(f"both gateways listed each other after {time.monotonic() - started:.1f} s")
    doc = fleet(a.url)
    assert doc["shared"] and "'fleet'" in doc["scope"]
    assert [i["instance"] for i in doc["instances"]] == ["gw-a", "gw-b"]  # itself first
    assert doc["instances"][1]["version"] and doc["instances"][1]["started"] > 0
    # every replica's verdict from both gateways (both probe them: serving, once probed)
    wait_until(
        lambda: all(
            set(v.values()) == {"serving"} and len(v) == 2
            for v in fleet(a.url)["replicas"].values()
        ),
        SEEN_WITHIN_S,
        message=lambda: f"both gateways' verdicts in A's view: {fleet(a.url)['replicas']}",
    )
    assert len(fleet(a.url)["replicas"]) == 2
    b.stop()
    wait_until(
        lambda: alive(a.url) == {"gw-a": True, "gw-b": False},
        20,
        message=lambda: f"A to show the stopped B stale: {fleet(a.url)['instances']}",
    )


def test_without_shared_state_the_fleet_is_this_instance_only(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    gateway = start_gw(pool_config(start_replicas(1)))
    doc = fleet(gateway.url)
    assert doc["shared"] is False
    assert doc["scope"] == "this instance only (no shared state configured)"
    assert len(doc["instances"]) == 1 and doc["instances"][0]["self"]

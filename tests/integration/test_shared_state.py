"""Issue-level proofs for shared state: two real gateways on one real redis-server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults_async
from tests.support.gateway import pool_config
from tests.support.processes import ReplicaProcess, wait_until
from tests.support.redis_server import RedisServer
from tests.support.traffic import drive, drive_until

pytestmark = pytest.mark.integration
SYNC_S = 0.2
SLO = {"name": "availability", "kind": "availability", "objective": 0.99}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


def shared_config(replicas: list[ReplicaProcess], redis: RedisServer, name: str) -> dict[str, Any]:
    config = pool_config(replicas, slos=[SLO])
    config["retry_budget"] = {"window_s": 60}  # long enough that no count ages out mid-test
    config["state"] = {"backend": "redis", "redis_url": redis.url, "sync_interval_s": SYNC_S,
                       "instance": name}  # fmt: skip
    return config


def get(url: str, path: str) -> dict[str, Any]:
    return dict(httpx.get(url + path, trust_env=False, timeout=5).json())


def r0_state(url: str) -> dict[str, Any]:
    return dict(get(url, "/admin/state")["pools"][0]["replicas"][0])


def r0_out(url: str) -> bool:
    replica = r0_state(url)
    return bool(replica["ejected"] or replica["breaker"]["state"] != "closed")


def slo_total(url: str) -> int:
    slo = get(url, "/slo")
    return int(slo["models"]["digits"]["slos"][0]["events"]["total"])


async def test_one_gateways_discovery_protects_the_other_and_slos_are_global(
    start_replicas: StartReplicas, start_gw: StartGateway, redis: RedisServer
) -> None:
    replicas = start_replicas(3)
    a = start_gw(shared_config(replicas, redis, "gw-a"))
    b = start_gw(shared_config(replicas, redis, "gw-b"))
    await inject_faults_async(replicas[0].url, error_rate=1.0)
    traffic = await drive_until(  # traffic through A only, until A takes r0 out
        a.url,
        lambda _: r0_out(a.url),
        timeout_s=30,
        message=lambda: f"gateway A to take r0 out; r0: {r0_state(a.url)}",
    )
    assert traffic.failed == 0
    seen_at = time.monotonic()
    wait_until(lambda: r0_out(b.url), 5, message="gateway B to learn of r0 from gateway A")
    delay = time.monotonic() - seen_at
    print(f"propagation A -> B: {delay * 1000:.0f} ms (sync interval {SYNC_S * 1000:.0f} ms)")
    await drive(b.url, requests=40, concurrency=4)
    total_a = sum(r["requests"] for r in get(a.url, "/admin/state")["pools"][0]["replicas"])
    assert total_a > 0
    wait_until(
        lambda: slo_total(a.url) == slo_total(b.url) and slo_total(a.url) > 40,
        5,
        message=lambda: f"SLO totals to agree: {slo_total(a.url)} vs {slo_total(b.url)}",
    )
    # the retry budget is shared too: B's window counts A's requests as well as its own 40
    wait_until(lambda: get(b.url, "/admin/state")["retry_budget"]["requests_in_window"] > 80, 5)


async def test_redis_killed_under_load_fails_no_request_then_reconciles(
    start_replicas: StartReplicas, start_gw: StartGateway, redis: RedisServer
) -> None:
    replicas = start_replicas(2)
    gateway = start_gw(shared_config(replicas, redis, "gw-a"))
    traffic = await drive(gateway.url, requests=600, concurrency=8, events={150: redis.kill})
    assert traffic.failed == 0 and len(traffic.answers) == 600
    wait_until(lambda: get(gateway.url, "/admin/state")["state_store"]["degraded"], 10)
    redis.start()
    wait_until(lambda: not get(gateway.url, "/admin/state")["state_store"]["degraded"], 10,
               message="the store to recover")  # fmt: skip
    assert (await drive(gateway.url, requests=50, concurrency=4)).failed == 0

"""Issue-level proofs for shared state: real gateways on one real redis-server or a real
3-node Redis Cluster (loopback), under load, with one gateway SIGKILLed."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults_async
from tests.support.gateway import GatewayProcess, pool_config
from tests.support.processes import ReplicaProcess, wait_until, wait_until_async
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import RedisServer
from tests.support.traffic import drive, drive_until, request_bodies

pytestmark = pytest.mark.integration
SYNC_S = 0.2
SLO = {"name": "availability", "kind": "availability", "objective": 0.99}


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisClusterServers]:
    servers = RedisClusterServers()
    servers.start()
    yield servers
    servers.stop()


@pytest.fixture(params=["single", "cluster"])
def store(request: pytest.FixtureRequest) -> RedisServer | RedisClusterServers:
    """The shared store as one redis-server, or as a 3-node Redis Cluster."""
    fixture = "redis" if request.param == "single" else "cluster"
    server: RedisServer | RedisClusterServers = request.getfixturevalue(fixture)
    return server


def shared_config(
    replicas: list[ReplicaProcess],
    redis: RedisServer | RedisClusterServers,
    name: str,
    namespace: str = "gw",
) -> dict[str, Any]:
    config = pool_config(replicas, slos=[SLO])
    config["retry_budget"] = {"window_s": 60}  # long enough that no count ages out mid-test
    config["state"] = {
        "backend": "redis",
        "redis_url": redis.url,
        "sync_interval_s": SYNC_S,
        "instance": name,
        "namespace": namespace,
    }
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
    start_replicas: StartReplicas,
    start_gw: StartGateway,
    store: RedisServer | RedisClusterServers,
    request: pytest.FixtureRequest,
) -> None:
    replicas = start_replicas(3)
    ns = f"discovery-{request.node.callspec.id}"  # its own keys on the module's cluster
    a = start_gw(shared_config(replicas, store, "gw-a", ns))
    b = start_gw(shared_config(replicas, store, "gw-b", ns))
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
    wait_until(
        lambda: not get(gateway.url, "/admin/state")["state_store"]["degraded"],
        10,
        message="the store to recover",
    )
    assert (await drive(gateway.url, requests=50, concurrency=4)).failed == 0


async def _watch_r0(urls: dict[str, str], out_at: dict[str, float], stop: asyncio.Event) -> None:
    """Polls each gateway's view of r0 every 10 ms; ``out_at[name]``: when it first saw r0 out."""
    async with httpx.AsyncClient(trust_env=False, timeout=2) as client:
        while not stop.is_set():
            for name, url in urls.items():
                if name in out_at:
                    continue
                state = (await client.get(url + "/admin/state")).json()
                r0 = state["pools"][0]["replicas"][0]
                if r0["ejected"] or r0["breaker"]["state"] != "closed":
                    out_at[name] = time.monotonic()
            await asyncio.sleep(0.01)


async def _load(
    gateways: dict[str, GatewayProcess], seconds: float, kill: str, kill_after_s: float
) -> tuple[Counter[str], Counter[str], int]:
    """Three clients per gateway for ``seconds``; ``kill`` is SIGKILLed after ``kill_after_s``
    and gets no new request from then on. Returns (ok, failed) per gateway and how many
    requests were in flight to ``kill`` when it died."""
    bodies = request_bodies()
    ok: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    inflight: Counter[str] = Counter()
    killed: set[str] = set()
    headers = {"x-request-timeout-ms": "5000"}
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def client(name: str, url: str, n: int) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as http:
            while loop.time() < end and name not in killed:
                inflight[name] += 1
                try:
                    reply = await http.post(
                        "/v2/models/digits/infer", content=bodies[n % len(bodies)], headers=headers
                    )
                    (ok if reply.status_code == 200 else failed)[name] += 1
                except httpx.HTTPError:
                    failed[name] += 1
                finally:
                    inflight[name] -= 1
                n += 1

    async def killer() -> int:
        await asyncio.sleep(kill_after_s)
        killed.add(kill)  # no worker sends to it from here on (one thread: no race)
        os.kill(gateways[kill].pid, signal.SIGKILL)
        return inflight[kill]

    clients = [client(name, gw.url, i) for name, gw in gateways.items() for i in range(3)]
    kill_task = asyncio.create_task(killer())
    await asyncio.gather(*clients)
    return ok, failed, await kill_task


async def test_three_gateways_on_a_cluster_under_load_one_killed(
    start_replicas: StartReplicas, start_gw: StartGateway, cluster: RedisClusterServers
) -> None:
    """Issue 14: three gateways share a Redis Cluster. One gateway's ejection reaches the other
    two within a few sync intervals; a SIGKILLed gateway fails only its in-flight requests."""
    replicas = start_replicas(3)
    names = ("gw-a", "gw-b", "gw-c")
    gws = {n: start_gw(shared_config(replicas, cluster, n, "three")) for n in names}

    # 1. r0 fails; only A gets traffic, so B and C can learn of it only through the cluster
    await inject_faults_async(replicas[0].url, error_rate=1.0)
    out_at: dict[str, float] = {}
    stop = asyncio.Event()
    watcher = asyncio.create_task(_watch_r0({n: g.url for n, g in gws.items()}, out_at, stop))
    try:
        traffic = await drive_until(
            gws["gw-a"].url,
            lambda _: "gw-a" in out_at,
            timeout_s=30,
            message=lambda: f"gateway A to take r0 out; r0: {r0_state(gws['gw-a'].url)}",
        )
        await wait_until_async(lambda: len(out_at) == 3, 5, message=lambda: f"seen: {out_at}")
    finally:
        stop.set()
        await watcher
    assert traffic.failed == 0
    lag = {n: (out_at[n] - out_at["gw-a"]) * 1000 for n in ("gw-b", "gw-c")}
    print(
        f"\nejection by A seen by B after {lag['gw-b']:.0f} ms, by C after {lag['gw-c']:.0f} ms "
        f"(sync interval {SYNC_S * 1000:.0f} ms, 10 ms polling)"
    )
    assert max(lag.values()) < 3000  # a few intervals; generous for a busy machine

    # 2. load on all three; C is SIGKILLed mid-load: A and B fail nothing, C only in-flight
    ok, failed, in_flight = await _load(gws, seconds=6.0, kill="gw-c", kill_after_s=2.5)
    print(
        f"load 6 s, 3 clients per gateway, gw-c SIGKILLed at 2.5 s: ok {dict(ok)}, "
        f"failed {dict(failed)}, in flight to gw-c at the kill {in_flight}"
    )
    assert failed["gw-a"] == failed["gw-b"] == 0
    assert failed["gw-c"] <= in_flight <= 3
    assert ok["gw-a"] > 0 and ok["gw-b"] > 0 and ok["gw-c"] > 0
    for name in ("gw-a", "gw-b"):
        assert not get(gws[name].url, "/admin/state")["state_store"]["degraded"]

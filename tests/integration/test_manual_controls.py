"""Operators' controls on real replicas and real gateways (loopback), with a real redis-server:
drain (in-flight requests finish, no new ones), eject for a duration, the audit trail with the
operator's name, and a fleet of two gateways on one Redis obeying one action."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults_async
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import wait_until, wait_until_async
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration
ALICE = "alice-key-0123456789abcdef"
OPERATORS = {"admin": {"operators": {"alice": {"key_env": "ALICE_KEY"}}}}
AS_ALICE = {"authorization": f"Bearer {ALICE}"}
REQUEST = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}
)
SYNC_S = 0.5


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.stop()


def state(url: str) -> dict[str, Any]:
    return dict(httpx.get(url + "/admin/state", headers=AS_ALICE, trust_env=False).json())


def draining(url: str) -> list[str]:
    return [r["id"] for r in state(url)["pools"][0]["draining"]]


async def get_json(url: str, path: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as http:
        return dict((await http.get(path, headers=AS_ALICE)).json())


async def served_by(http: httpx.AsyncClient, n: int) -> list[str]:
    answers = []
    for _ in range(n):
        answer = await http.post("/v2/models/digits/infer", content=REQUEST)
        assert answer.status_code == 200, answer.text
        answers.append(answer.headers["x-served-by"])
    return answers


async def test_a_drained_replica_gets_no_new_requests_while_its_in_flight_ones_finish(
    start_replicas: StartReplicas,
) -> None:
    replicas = start_replicas(2)
    config = pool_config(replicas)
    config["server"] = OPERATORS
    gateway = start_gateway(config, env={"ALICE_KEY": ALICE})
    try:
        await inject_faults_async(replicas[0].url, latency_ms=1500)  # r0's answers take 1.5 s
        headers = {"x-request-timeout-ms": "10000"}
        async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=20) as http:

            def send_slow() -> list[asyncio.Task[httpx.Response]]:
                return [
                    asyncio.create_task(
                        http.post("/v2/models/digits/infer", content=REQUEST, headers=headers)
                    )
                    for _ in range(6)
                ]

            async def r0_busy() -> bool:  # asked on the loop: the slow requests go on meanwhile
                doc = (await http.get("/admin/state", headers=AS_ALICE)).json()
                [r0] = [r for r in doc["pools"][0]["replicas"] if r["id"] == "r0"]
                return bool(r0["outstanding"] > 0)

            # ready means a replica per model: r0 may join the rotation after the first
            # requests were answered by r1, so more go until one is in flight on r0
            slow = send_slow()
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30  # a blocking poll here once starved the requests for 5 s
            while not await r0_busy():
                assert loop.time() < deadline, "no request in flight on r0 in 30 s"
                if all(task.done() for task in slow):
                    slow += send_slow()
                await asyncio.sleep(0.01)
            drained = await http.post(
                "/admin/replicas/r0/drain", json={"reason": "test"}, headers=AS_ALICE
            )
            assert drained.status_code == 200, drained.text
            assert draining(gateway.url) == ["r0"]
            after = await served_by(http, 20)  # while r0's requests are still in flight
            answers = await asyncio.gather(*slow)
        assert after == ["r1"] * 20
        assert all(a.status_code == 200 for a in answers)  # the in-flight ones finished
        finished_on_r0 = [a for a in answers if a.headers["x-served-by"] == "r0"]
        assert finished_on_r0 and all(a.headers["x-attempts"] == "1" for a in finished_on_r0)
        r0 = state(gateway.url)["pools"][0]["draining"][0]
        assert r0["outstanding"] == 0 and r0["requests"] == len(finished_on_r0)
        history = await get_json(gateway.url, "/admin/history")
        [event] = [e for e in history["events"] if e["kind"] == "manual"]
        assert event["by"] == "alice" and event["subject"] == "replica:r0"
        assert event["detail"] == "drain by alice: test (applied)"
        log = gateway.log_text()
        assert '"who":"alice"' in log and '"target":"replica:r0"' in log and ALICE not in log
    finally:
        gateway.cleanup()


async def test_an_ejected_replica_comes_back_after_its_duration(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    gateway = start_gw(pool_config(replicas))  # loopback, no key: acts as "anonymous"
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
        ejected = await http.post("/admin/replicas/r1/eject", json={"duration_s": 2})
        assert ejected.status_code == 200 and ejected.json()["by"] == "anonymous"
        started = time.monotonic()
        assert set(await served_by(http, 10)) == {"r0"}
        await wait_until_async(
            lambda: draining(gateway.url) == [], 5, message="r1 back after its eject"
        )
        took = time.monotonic() - started
        print(f"r1 back {took:.2f} s after a 2 s eject")
        assert took >= 1.5  # not before its time (less the time the first answers took)
        history = (await http.get("/admin/history")).json()
        assert any(
            e["kind"] == "manual" and e["detail"] == "back in service" for e in history["events"]
        )


async def test_two_gateways_on_one_redis_obey_one_action_and_keep_it_across_a_restart(
    start_replicas: StartReplicas, redis: RedisServer
) -> None:
    replicas = start_replicas(2)

    def config(name: str) -> dict[str, Any]:
        doc = pool_config(replicas)
        doc["server"] = OPERATORS
        doc["state"] = {
            "backend": "redis",
            "redis_url": redis.url,
            "sync_interval_s": SYNC_S,
            "instance": name,
            "namespace": "controls",
        }
        return doc

    env = {"ALICE_KEY": ALICE}
    gateways: list[GatewayProcess] = []
    try:
        a = start_gateway(config("gw-a"), env=env)
        gateways.append(a)
        b = start_gateway(config("gw-b"), env=env)
        gateways.append(b)
        async with httpx.AsyncClient(base_url=a.url, trust_env=False, timeout=10) as http:
            drained = await http.post(
                "/admin/replicas/r1/drain", json={"reason": "fleet"}, headers=AS_ALICE
            )
        assert drained.status_code == 200 and drained.json()["shared"] is True
        wait_until(
            lambda: draining(b.url) == ["r1"],
            5,
            interval=0.01,
            message="gateway B to obey A's drain",
        )
        events = await get_json(b.url, "/admin/history")
        [event] = [e for e in events["events"] if e["kind"] == "manual"]
        assert event["by"] == "alice" and "obeyed (decided on gateway gw-a)" in event["detail"]
        took = event["t"] - drained.json()["at"]  # B's wall clock when it obeyed, A's at the act
        print(f"A's drain obeyed by B after {took * 1000:.0f} ms (sync interval {SYNC_S} s)")
        assert took <= SYNC_S + 0.75  # one sync interval, plus round trips and a busy loop's lag
        async with httpx.AsyncClient(base_url=b.url, trust_env=False, timeout=10) as http:
            assert set(await served_by(http, 10)) == {"r0"}
        b.stop()  # a restart: B reads the decision back from Redis
        gateways.remove(b)
        b = start_gateway(config("gw-b"), env=env)
        gateways.append(b)
        assert draining(b.url) == ["r1"]
        async with httpx.AsyncClient(base_url=b.url, trust_env=False, timeout=10) as http:
            assert set(await served_by(http, 10)) == {"r0"}
            restored = await http.post("/admin/replicas/r1/restore", json={}, headers=AS_ALICE)
            assert restored.status_code == 200
        wait_until(lambda: draining(a.url) == [], 5, message="A to obey B's restore")
    finally:
        for gateway in gateways:
            gateway.cleanup()


async def test_a_lone_gateway_keeps_a_drain_across_a_restart_in_its_decisions_file(
    start_replicas: StartReplicas, tmp_path: Path
) -> None:
    replicas = start_replicas(2)
    config = pool_config(replicas)
    config["state"] = {"decisions_file": str(tmp_path / "decisions")}
    gateway = start_gateway(config)
    try:
        async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
            drained = await http.post("/admin/replicas/r0/drain", json={"reason": "disk"})
            assert drained.status_code == 200 and drained.json()["outcome"] == "applied"
        gateway.stop()
        gateway.cleanup()
        gateway = start_gateway(config)
        assert draining(gateway.url) == ["r0"]
        wait_until(
            lambda: state(gateway.url)["pools"][0]["draining"][0]["healthy"] is True,
            10,
            message="the held replica probed from the start",
        )
        async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
            assert set(await served_by(http, 10)) == {"r1"}
    finally:
        gateway.cleanup()

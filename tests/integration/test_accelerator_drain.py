"""Drain before the GPU fails, on real processes: replicas with injected accelerator
readings, a real gateway sampling them, and the drain, restore and limits seen from outside
(``/admin/state``, ``/metrics``, the timeline, the served-by header)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults_async
from tests.support.gateway import pool_config
from tests.support.processes import ReplicaProcess, free_port, start_bound
from tests.support.redis_server import RedisServer
from tests.support.rogue_metrics import UUID_A, UUID_B
from tests.support.traffic import request_bodies

pytestmark = pytest.mark.integration
WAIT_S = 20.0  # bound on every condition below (a busy 2-core machine)


def accelerator_config(replicas: list[ReplicaProcess], **accelerator: Any) -> dict[str, Any]:
    section = {"interval_s": 0.1, "healthy_for_s": 1.0, "lead_s": 2.0, **accelerator}
    return pool_config(replicas, pool={"accelerator": section, "health": {"interval_s": 0.2}})


async def state(http: httpx.AsyncClient) -> dict[str, Any]:
    doc: dict[str, Any] = (await http.get("/admin/state")).json()
    return doc


async def decision_of(http: httpx.AsyncClient, replica: str) -> dict[str, Any] | None:
    decisions = (await state(http))["state_store"]["decisions"]
    found: dict[str, Any] | None = decisions.get(f"replica:{replica}")
    return found if found is not None and found["holds"] else None


async def until(check: Any, what: str) -> None:
    """Polls the async ``check`` (a coroutine function) until it is true, within WAIT_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not await check():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {WAIT_S:g} s waiting for {what}")
        await asyncio.sleep(0.05)


async def test_an_uncorrectable_ecc_error_drains_and_healthy_samples_restore(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    gateway = start_gw(accelerator_config(replicas))
    body = request_bodies(1)[0]
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
        await until(lambda: _sampled(http, "r0"), "r0 sampled")
        await inject_faults_async(replicas[0].url, accelerator={"ecc_dbe_total": 1})
        await until(lambda: _held(http, "r0"), "the accelerator drain of r0")
        held = await decision_of(http, "r0")
        assert held is not None and held["by"] == "hardware"
        assert held["state"] == "drained: hardware — uncorrectable ECC errors 1"
        doc = await state(http)
        r0 = doc["accelerators"]["primary"]["replicas"]["r0"]
        assert r0["drained"]["signal"] == "ecc_dbe" and r0["drained"]["threshold"] == 0
        served = {(await http.post("/v2/models/digits/infer", content=body)).headers[
            "x-served-by"] for _ in range(20)}  # fmt: skip
        assert served == {"r1"}
        metrics = (await http.get("/metrics")).text
        assert 'gateway_hardware_drained{pool="primary",replica="r0",signal="ecc_dbe"} 1.0' in (
            metrics
        )
        history = (await http.get("/admin/history")).text
        assert "drain by hardware: uncorrectable ECC errors 1" in history
        await inject_faults_async(replicas[0].url, accelerator=None)  # no device: unknown
        await asyncio.sleep(1.5)  # over healthy_for_s, unknown all along: still drained
        assert await decision_of(http, "r0") is not None
        healthy = {"ecc_dbe_total": 0, "temperature_c": 50}
        await inject_faults_async(replicas[0].url, accelerator=healthy)
        await until(lambda: _released(http, "r0"), "r0 back after healthy_for_s")
        doc = await state(http)
        assert doc["state_store"]["decisions"]["replica:r0"]["action"] == "restore"
        assert "r0" in {r["id"] for r in doc["pools"][0]["replicas"]}


async def test_the_last_replica_is_not_drained_without_a_fallback(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    (replica,) = start_replicas(1)
    gateway = start_gw(accelerator_config([replica]))
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
        await until(lambda: _sampled(http, "r0"), "r0 sampled")
        await inject_faults_async(replica.url, accelerator={"temperature_c": 93})
        await until(lambda: _held_back(http, "r0"), "the drain held back")
        assert await decision_of(http, "r0") is None
        body = request_bodies(1)[0]
        assert (await http.post("/v2/models/digits/infer", content=body)).status_code == 200


async def test_a_replica_without_an_accelerator_is_unknown_not_healthy(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    gateway = start_gw(accelerator_config(replicas))
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:

        async def sampled() -> bool:
            doc = (await state(http))["accelerators"]["primary"]["replicas"]
            return all(doc.get(r, {}).get("error") for r in ("r0", "r1"))

        await until(sampled, "both replicas sampled")
        doc = (await state(http))["accelerators"]["primary"]["replicas"]
        assert {doc[r]["state"] for r in ("r0", "r1")} == {"unknown"}
        assert doc["r0"]["error"] == "no accelerator readings"
        assert await decision_of(http, "r0") is None and await decision_of(http, "r1") is None


async def _sampled(http: httpx.AsyncClient, replica: str) -> bool:
    """Sampled at least once (a replica without a GPU: unknown, "no accelerator readings")."""
    doc = (await state(http)).get("accelerators", {}).get("primary", {}).get("replicas", {})
    return doc.get(replica, {}).get("error") is not None


async def _held(http: httpx.AsyncClient, replica: str) -> bool:
    return await decision_of(http, replica) is not None


async def _released(http: httpx.AsyncClient, replica: str) -> bool:
    return await decision_of(http, replica) is None


async def _held_back(http: httpx.AsyncClient, replica: str) -> bool:
    doc = (await state(http))["accelerators"]["primary"]["replicas"].get(replica, {})
    return bool(doc.get("held_back"))


async def test_a_rising_temperature_drains_before_it_reaches_slowdown(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    gateway = start_gw(accelerator_config(replicas, lead_s=2.0, fit_s=1.0))
    ramp = {"from": 70, "to": 100, "over_s": 6}  # 5 °C/s: slowdown (90 °C) after 4 s
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
        await until(lambda: _sampled(http, "r0"), "r0 sampled")
        await inject_faults_async(replicas[0].url, accelerator={"temperature_ramp": ramp})
        await until(lambda: _held(http, "r0"), "the early drain of r0")
        drained = (await state(http))["accelerators"]["primary"]["replicas"]["r0"]["drained"]
        assert drained["signal"] == "temperature_trend" and drained["action"] == "drain early"
        assert (
            drained["text"].startswith("temperature ") and "slowdown at 90 °C in" in drained["text"]
        )
        held = await decision_of(http, "r0")
        assert held is not None and held["reason"] == drained["text"]


async def test_a_pool_without_accelerator_samples_nothing(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(1)
    gateway = start_gw(pool_config(replicas))
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
        assert (await state(http))["accelerators"] == {}
        assert "gateway_accelerator" not in (await http.get("/metrics")).text


async def test_with_shared_state_every_gateway_drains_the_same_replica(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    """Gateway A samples and decides; gateway B, without `accelerator:`, obeys the decision
    from Redis as it obeys an operator's drain."""
    redis = RedisServer()
    redis.start()
    try:
        replicas = start_replicas(2)
        shared = {"backend": "redis", "redis_url": redis.url, "sync_interval_s": 0.2,
                  "namespace": "hw"}  # fmt: skip
        sampling = {**accelerator_config(replicas), "state": {**shared, "instance": "a"}}
        plain = {**pool_config(replicas), "state": {**shared, "instance": "b"}}
        a, b = start_gw(sampling), start_gw(plain)
        async with (
            httpx.AsyncClient(base_url=a.url, trust_env=False, timeout=10) as http_a,
            httpx.AsyncClient(base_url=b.url, trust_env=False, timeout=10) as http_b,
        ):
            await until(lambda: _sampled(http_a, "r0"), "r0 sampled by gateway a")
            await inject_faults_async(replicas[0].url, accelerator={"xid": 79})
            await until(lambda: _held(http_b, "r0"), "gateway b obeying the drain")
            held = await decision_of(http_b, "r0")
            assert held is not None and held["origin"] == "a"
            assert held["state"] == "drained: hardware — critical XID 79"
            doc = await state(http_b)
            assert "r0" not in {r["id"] for r in doc["pools"][0]["replicas"]}
            assert doc["accelerators"] == {}  # b samples nothing itself
    finally:
        redis.stop()


@pytest.fixture
def rogue() -> Iterator[ReplicaProcess]:
    """`tests.support.rogue_metrics`: "replicas" under path prefixes and hostile pages."""

    def launch() -> ReplicaProcess:
        port = free_port()
        argv = [sys.executable, "-m", "tests.support.rogue_metrics", "--port", str(port)]
        return ReplicaProcess(argv, host="127.0.0.1", port=port, name="digits", version="1")

    proc = start_bound(launch, "rogue metrics server", 20.0)
    yield proc
    proc.cleanup()


def rogue_config(
    rogue: ReplicaProcess, exporters: dict[str, tuple[str, str]], **accelerator: Any
) -> dict[str, Any]:
    """A pool of four "replicas" on the rogue's one host and port, ``r<i>`` under ``/r<i>``;
    ``exporters``: replica id -> (the rogue's page path, the GPU's UUID on it)."""
    section = {
        "interval_s": 0.1,
        **accelerator,
        "exporters": {
            r: {"url": rogue.url, "path": p, "uuid": u} for r, (p, u) in exporters.items()
        },
    }
    pool = {
        "model": "digits",
        "version": "1",
        "replicas": [{"id": f"r{i}", "url": f"{rogue.url}/r{i}"} for i in range(1, 5)],
        "accelerator": section,
    }
    return {"pools": {"rogue": pool}, "models": {"digits": {"pool": "rogue"}}}


async def accelerators(http: httpx.AsyncClient) -> dict[str, Any]:
    doc: dict[str, Any] = (await state(http))["accelerators"]["rogue"]["replicas"]
    return doc


async def test_huge_pages_and_floods_of_series_are_refused_and_the_gateway_keeps_answering(
    rogue: ReplicaProcess, start_gw: StartGateway
) -> None:
    """Before: a 15 MiB page at 1 s held /v2/health/live for up to 10 s; every page was read
    whole and parsed on the event loop. Now each is refused (read no further than its cap) and
    liveness answers throughout (asserted as answered, within a generous client timeout)."""
    exporters = {"r1": ("/huge", UUID_A), "r2": ("/huge-framed", UUID_A), "r3": ("/series", UUID_A)}
    # 8 MiB: the page of 60,000 series passes the byte cap, and meets the series cap
    gateway = start_gw(rogue_config(rogue, exporters, max_page_bytes=8 << 20, timeout_s=0.3))
    refused = {"r1", "r2", "r3"}
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=5) as http:
        seen: dict[str, Any] = {}

        async def all_refused() -> bool:
            doc = seen["doc"] = await accelerators(http)
            errors = {r: (doc.get(r) or {}).get("error") or "" for r in refused}
            return all(e.startswith("page refused: ") for e in errors.values())

        async def live() -> list[int]:
            statuses = []
            for _ in range(60):  # ~3 s of samples at 0.1 s: dozens of refused pages
                statuses.append((await http.get("/v2/health/live")).status_code)
                await asyncio.sleep(0.05)
            return statuses

        answered = asyncio.create_task(live())
        await until(all_refused, "the three hostile pages refused")
        assert await answered == [200] * 60
        doc = seen["doc"]  # as it was when all three were refused
        assert "over max_page_bytes=8388608" in doc["r1"]["error"]
        assert "over max_page_bytes=8388608" in doc["r2"]["error"]
        assert "60000 series, over max_page_series=10000" in doc["r3"]["error"]
        assert {doc[r]["state"] for r in refused} == {"unknown"}
        assert doc["r4"]["state"] == "ok" and doc["r4"]["reading"]["temperature_c"] == 64.0
        metrics = (await http.get("/metrics")).text
        assert 'gateway_accelerator_samples_total{pool="rogue",result="refused"}' in metrics


async def test_a_nan_beside_a_hot_gpu_and_replicas_under_two_prefixes(
    rogue: ReplicaProcess, start_gw: StartGateway
) -> None:
    """Before: r1's NaN on the shared exporter page ended the page's loop, so r2 at 100 °C was
    never drained; and r3, r4 (one host and port, two prefixes) had one loop between them."""
    exporters = {"r1": ("/nan-beside-hot", UUID_A), "r2": ("/nan-beside-hot", UUID_B)}
    gateway = start_gw(rogue_config(rogue, exporters))
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as http:
        await until(lambda: _held(http, "r2"), "the accelerator drain of r2")
        held = await decision_of(http, "r2")
        assert held is not None and held["state"] == (
            "drained: hardware — temperature 100 °C, slowdown at 90 °C"
        )
        assert await decision_of(http, "r1") is None

        async def both_read() -> bool:
            doc = await accelerators(http)
            return all((doc.get(r) or {}).get("reading") for r in ("r3", "r4"))

        await until(both_read, "r3 and r4 both read")
        doc = await accelerators(http)
        assert doc["r1"]["reading"]["temperature_c"] is None and doc["r1"]["drained"] is None
        temperatures = {r: doc[r]["reading"]["temperature_c"] for r in ("r3", "r4")}
        assert temperatures == {"r3": 63.0, "r4": 64.0}
        metrics = (await http.get("/metrics")).text
        for replica, value in temperatures.items():
            labels = f'field="DCGM_FI_DEV_GPU_TEMP",pool="rogue",replica="{replica}"'
            assert f"gateway_accelerator_reading{{{labels}}} {value}" in metrics
        labels = 'field="DCGM_FI_DEV_GPU_TEMP",pool="rogue",replica="r1"'
        assert f"gateway_accelerator_bad_values_total{{{labels}}}" in metrics

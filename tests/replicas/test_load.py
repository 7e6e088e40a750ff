"""The replica's load: a report on every infer answer (ORCA's text form) and its queue on
``/metrics`` under Triton's name, in-process (httpx.ASGITransport)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest

from replicas.fault_auth import FaultKey
from replicas.faults import FaultInjector
from replicas.load import ReplicaLoad
from replicas.server import ReplicaApp
from tests.support.faults import FAULT_KEY, inject_faults_async
from tests.support.processes import wait_until_async
from v2proto.dcgm import Reading
from v2proto.load import HEADER, PENDING_METRIC, text_report

INFER = "/v2/models/digits/infer"
BODY = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
)


def test_the_report_says_queue_inflight_and_the_accelerator_when_there_is_one() -> None:
    load = ReplicaLoad(threads=2)
    for _ in range(5):
        load.began()
    assert load.queue == 3
    assert load.report(None) == "TEXT named_metrics.queue=3, named_metrics.inflight=5"
    hot = Reading("0", "GPU-1", temperature_c=81.5, ecc_sbe_total=2, power_w=300)
    assert load.report(hot) == (
        "TEXT named_metrics.queue=3, named_metrics.inflight=5, "
        "named_metrics.DCGM_FI_DEV_GPU_TEMP=81.5, named_metrics.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL=2"
    )
    for _ in range(5):
        load.ended()
    assert (load.queue, load.inflight) == (0, 0)
    assert text_report([("x", 1e308)]) == "TEXT named_metrics.x=1e+308"


@pytest.fixture
async def replica(model_path: Path) -> AsyncIterator[tuple[ReplicaApp, httpx.AsyncClient]]:
    injector = FaultInjector(random.Random(0))
    app = ReplicaApp(model_path, name="digits", faults=injector, fault_key=FaultKey(FAULT_KEY))
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r")
    await app.startup()
    yield app, client
    await client.aclose()
    await app.shutdown()


async def test_every_infer_answer_carries_a_load_report(
    replica: tuple[ReplicaApp, httpx.AsyncClient],
) -> None:
    _, client = replica
    ok = await client.post(INFER, content=BODY)
    assert ok.status_code == 200
    assert ok.headers[HEADER] == "TEXT named_metrics.queue=0, named_metrics.inflight=0"
    refused = await client.post(INFER, content=b"{")
    assert refused.status_code == 400 and HEADER in refused.headers
    assert HEADER not in (await client.get("/v2/health/ready")).headers


async def test_a_queue_shows_on_metrics_and_in_the_reports(
    replica: tuple[ReplicaApp, httpx.AsyncClient],
) -> None:
    app, client = replica
    await inject_faults_async(client, latency_ms=300)
    sent = [asyncio.create_task(client.post(INFER, content=BODY)) for _ in range(4)]

    await wait_until_async(lambda: app.load.inflight == 4, timeout=10)
    page = (await client.get("/metrics")).text
    assert f'{PENDING_METRIC}{{model="digits",version="1"}} 3.0' in page
    assert 'replica_requests_in_flight{model="digits",version="1"} 4.0' in page
    answers = await asyncio.gather(*sent)
    reports = sorted(a.headers[HEADER] for a in answers)
    # each answer reports the load as it leaves: the last one leaves an empty replica
    assert reports[0] == "TEXT named_metrics.queue=0, named_metrics.inflight=0"
    assert app.load.inflight == 0


async def test_an_injected_accelerator_is_in_the_report(
    replica: tuple[ReplicaApp, httpx.AsyncClient],
) -> None:
    _, client = replica
    await inject_faults_async(client, accelerator={"temperature_c": 88, "ecc_dbe_total": 1})
    report = (await client.post(INFER, content=BODY)).headers[HEADER]
    assert "named_metrics.DCGM_FI_DEV_GPU_TEMP=88" in report
    assert "named_metrics.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=1" in report

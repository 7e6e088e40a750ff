"""A pool of real ``replica serve --grpc-port`` processes reached over V2 gRPC (``grpc://``
URLs) behind a real gateway that REST clients call: the same answers as the same replicas over
REST, and the same guarantees under faults (crash, SIGSTOP hang, INTERNAL errors, another
request's id) with 16 requests in flight."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from tests.integration.conftest import StartGateway
from tests.support.faults import inject_faults_async
from tests.support.gateway import GatewayProcess
from tests.support.processes import ReplicaProcess, start_replica, wait_until
from tests.support.traffic import SCHEDULING_SLACK_S, drive, drive_until, request_bodies
from v2proto.codec import HEADER_LENGTH, decode_infer_response, encode_infer_request

pytestmark = pytest.mark.integration


@pytest.fixture
def grpc_replicas(models_dir: Path) -> Iterator[list[ReplicaProcess]]:
    started: list[ReplicaProcess] = []
    try:
        for _ in range(3):
            started.append(
                start_replica(
                    models_dir / "digits-mlp.onnx", name="digits-mlp", enable_faults=True, grpc=True
                )
            )
        yield started
    finally:
        for proc in started:
            proc.cleanup()


def config(replicas: list[ReplicaProcess], **pool: Any) -> dict[str, Any]:
    """Model ``digits`` on the replicas over gRPC (r0, r1, r2), ``digits-rest`` on the same over
    REST (h0, h1, h2)."""

    def members(grpc: bool) -> list[dict[str, str]]:
        prefix = "r" if grpc else "h"  # replica ids are unique across pools
        return [
            {"id": f"{prefix}{i}", "url": (r.grpc_url if grpc else r.url) or ""}
            for i, r in enumerate(replicas)
        ]

    common = {"model": "digits-mlp", "version": "1", **pool}
    return {
        "pools": {
            "grpc": {**common, "replicas": members(True)},
            "rest": {**common, "replicas": members(False)},
        },
        "models": {"digits": {"pool": "grpc"}, "digits-rest": {"pool": "rest"}},
    }


MODEL_OF = {"grpc": "digits", "rest": "digits-rest"}
HUNG_OF = {"grpc": "r0", "rest": "h0"}


def admin_replica(gateway: GatewayProcess, pool: str, replica_id: str) -> dict[str, Any]:
    state = httpx.get(f"{gateway.url}/admin/state", trust_env=False, timeout=5).json()
    for item in state["pools"]:
        if item["name"] == pool:
            for replica in item["replicas"]:
                if replica["id"] == replica_id:
                    return dict(replica)
    raise KeyError((pool, replica_id))


async def test_a_grpc_pool_answers_as_the_same_replicas_over_rest(
    grpc_replicas: list[ReplicaProcess], start_gw: StartGateway
) -> None:
    gateway = start_gw(config(grpc_replicas))
    x = np.stack([orjson.loads(b)["inputs"][0]["data"] for b in request_bodies(8)])
    x = x.reshape(8, 64).astype(np.float32)
    bodies = [
        encode_infer_request({"input": x}, request_id="j1"),
        encode_infer_request(
            {"input": x}, binary_inputs=True, binary_outputs=True, request_id="b1"
        ),
        encode_infer_request({"input": x[:1]}, ["label"], request_id="one"),
    ]
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as client:
        for sent in bodies:
            answers = []
            for model in ("digits", "digits-rest"):
                r = await client.post(
                    f"/v2/models/{model}/infer", content=sent.body, headers=sent.headers()
                )
                assert r.status_code == 200, r.text
                answers.append(decode_infer_response(r.content, r.headers.get(HEADER_LENGTH)))
                assert (HEADER_LENGTH in r.headers) is (sent.json_length is not None)
            over_grpc, over_rest = answers
            assert over_grpc.id == over_rest.id
            assert list(over_grpc.outputs) == list(over_rest.outputs)
            for name, arr in over_rest.outputs.items():
                assert over_grpc.outputs[name].dtype == arr.dtype
                assert np.array_equal(over_grpc.outputs[name], arr)
        for model in ("digits", "digits-rest"):
            meta = (await client.get(f"/v2/models/{model}")).json()
            assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}]
    assert admin_replica(gateway, "grpc", "r0")["healthy"] is True  # ModelReady probes


async def test_sigkill_one_of_three_under_16_in_flight_fails_no_request(
    grpc_replicas: list[ReplicaProcess], start_gw: StartGateway
) -> None:
    gateway = start_gw(config(grpc_replicas))
    victim = grpc_replicas[0]
    traffic = await drive(
        gateway.url,
        requests=600,
        concurrency=16,
        events={150: lambda: os.kill(victim.pid, signal.SIGKILL)},
    )
    assert traffic.failed == 0, [a.body for a in traffic.answers if a.status != 200][:3]
    assert len(traffic.answers) == 600
    wait_until(lambda: admin_replica(gateway, "grpc", "r0")["healthy"] is False, 10)
    print(f"grpc crash: max client latency {traffic.max_latency_s * 1000:.0f} ms")


@pytest.mark.solo  # a client-side latency bound: tests beside it slow the client's own loop
@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("pool", ["grpc", "rest"])
async def test_sigstop_one_of_three_under_16_in_flight_fails_no_request(
    grpc_replicas: list[ReplicaProcess], start_gw: StartGateway, pool: str, warm: bool
) -> None:
    """The same hang over gRPC and, for comparison, over REST to the same replicas. Cold: the
    replica stops before any traffic, so tries wait the cold per-try timeout (250 ms); warm:
    after 200 answers, so they wait the one learned from the pool's latency (3 × p99)."""
    gateway = start_gw(config(grpc_replicas))
    victim, model, hung = grpc_replicas[0], MODEL_OF[pool], HUNG_OF[pool]
    if warm:
        before = await drive(gateway.url, requests=200, concurrency=16, model=model)
        assert before.failed == 0
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        traffic = await drive_until(
            gateway.url,
            lambda _: admin_replica(gateway, pool, hung)["healthy"] is False,
            timeout_s=60,
            message=lambda: f"{hung} to be unhealthy: {admin_replica(gateway, pool, hung)}",
            requests=200,
            concurrency=16,
            timeout_ms=1000,
            model=model,
        )
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    assert traffic.failed == 0, [a.body for a in traffic.answers if a.status != 200][:3]
    assert traffic.max_latency_s < 1.0 + SCHEDULING_SLACK_S  # every answer by its deadline
    print(
        f"{pool} SIGSTOP ({'warm' if warm else 'cold'}): max client latency "
        f"{traffic.max_latency_s * 1000:.0f} ms"
    )


async def test_internal_errors_of_one_of_three_fail_no_request(
    grpc_replicas: list[ReplicaProcess], start_gw: StartGateway
) -> None:
    gateway = start_gw(config(grpc_replicas))
    await inject_faults_async(grpc_replicas[0].url, error_rate=1.0)  # INTERNAL over gRPC
    traffic = await drive(gateway.url, requests=300, concurrency=16)
    assert traffic.failed == 0, [a.body for a in traffic.answers if a.status != 200][:3]
    r0 = admin_replica(gateway, "grpc", "r0")
    assert r0["failures"] >= 1, r0
    assert traffic.served_by()["r0"] == 0


async def test_a_replica_answering_another_requests_id_is_refused_and_charged(
    grpc_replicas: list[ReplicaProcess], start_gw: StartGateway
) -> None:
    gateway = start_gw(config(grpc_replicas))
    await inject_faults_async(grpc_replicas[0].url, wrong_id=True)
    bodies = request_bodies(16)
    wrong: list[tuple[int | str, str]] = []
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as client:
        for i in range(60):
            request = orjson.loads(bodies[i % len(bodies)])
            request["id"] = f"client-{i}"
            r = await client.post("/v2/models/digits/infer", content=orjson.dumps(request))
            if r.status_code != 200 or r.json().get("id") != request["id"]:
                wrong.append((r.status_code, r.text))
            if r.headers.get("x-served-by") == "r0":
                wrong.append(("served by the rogue", r.text))
    assert not wrong, wrong[:3]
    r0 = admin_replica(gateway, "grpc", "r0")
    assert r0["failures"] >= 1, r0
    assert "id" in (r0.get("last_error") or ""), r0

"""A client that leaves takes its tries with it (issue 37, finding 12), on real processes.

``digits`` on three real ``digits-mlp`` replicas slowed to 3 s; a request with a 5 s deadline
whose client hangs up at 0.3 s, when the per-try race has a try open on every replica. Then,
measured from the replicas' side, no replica holds a try of it any more: a REST replica has
closed the connection that carried it (its own side of the socket, `tests.support.connections`),
a gRPC replica's handler was cancelled (its own ``replica_requests_in_flight``); the gateway
records one 499 (``/metrics``, Triton's statistics) and the SLO's events do not move. Once through
the REST door to REST replicas, once through the gRPC door to gRPC replicas.

The bound asserted on the replicas' side is `STOPPED_WITHIN_S`, well under the 2.7 s the tries
would otherwise have run on a busy machine's clock; the time it took is printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.connections import established
from tests.support.faults import inject_faults_async
from tests.support.gateway import pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica, wait_until_async
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import Stub

pytestmark = pytest.mark.integration
SLOW_MS = 3000  # every replica's added latency
DEADLINE_MS = 5000
LEAVES_AT_S = 0.3
STOPPED_WITHIN_S = 1.0
WARM_UP = 30  # answers before the per-try timeout is learned (20), then some
SLOS = [
    {"name": "availability", "kind": "availability", "objective": 0.999},
    {"name": "latency", "kind": "latency", "objective": 0.99, "threshold_ms": 100},
]
ROW = [0.5] * 64
TENSOR = {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": ROW}
BODY = orjson.dumps({"inputs": [TENSOR]})


def in_flight(replica: ReplicaProcess, client: httpx.Client | None = None) -> int:
    """The replica's own count of infer requests received and not yet answered."""
    get = client.get if client is not None else httpx.get
    text = get(f"{replica.url}/metrics", timeout=5).text
    for line in text.splitlines():
        if line.startswith("replica_requests_in_flight{"):
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError("the replica exposes no replica_requests_in_flight")


def recorded(url: str) -> tuple[float, int, list[dict[str, int]]]:
    """The gateway's 499s for ``digits`` in /metrics, its failures in Triton's statistics, and
    the events of each of its SLOs."""
    metrics = httpx.get(f"{url}/metrics", trust_env=False, timeout=5).text
    left = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("gateway_requests_total{")
        and 'model="digits"' in line
        and 'code="499"' in line
    )
    stats = httpx.get(f"{url}/v2/models/digits/stats", trust_env=False, timeout=5).json()
    failed = int(stats["model_stats"][0]["inference_stats"]["fail"]["count"])
    slo = httpx.get(f"{url}/slo", trust_env=False, timeout=5).json()["models"]["digits"]
    return left, failed, [dict(s["events"]) for s in slo["slos"]]


async def warm_up_and_slow_down(url: str, replicas: list[ReplicaProcess]) -> None:
    """Answers enough for the per-try timeout to be learned (a few ms, so three tries go out in
    well under `LEAVES_AT_S`), then every replica takes `SLOW_MS`."""
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
        for _ in range(WARM_UP):
            response = await client.post("/v2/models/digits/infer", content=BODY)
            assert response.status_code == 200, response.text
    for replica in replicas:
        await inject_faults_async(replica.url, latency_ms=SLOW_MS)


async def stopped(replicas_done: Callable[[], bool]) -> str:
    """Polls ``replicas_done`` (one reading at a time) until it holds, within
    `STOPPED_WITHIN_S`; says when, as the interval between the last reading that saw a try
    open and the first that saw none (a reading of the replicas takes milliseconds)."""
    began = time.monotonic()
    last_open = 0.0
    while not replicas_done():
        last_open = time.monotonic() - began
        assert last_open < STOPPED_WITHIN_S, "the replicas still hold a try of the request"
        await asyncio.sleep(0.001)
    return f"{last_open * 1000:.1f}-{(time.monotonic() - began) * 1000:.1f} ms"


async def test_a_rest_client_that_leaves_leaves_no_try_open_at_the_replicas(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(3)
    gateway = start_gw(pool_config(replicas, slos=SLOS))
    await warm_up_and_slow_down(gateway.url, replicas)
    before = recorded(gateway.url)
    _, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    head = (
        b"POST /v2/models/digits/infer HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"x-request-timeout-ms: %d\r\ncontent-length: %d\r\n\r\n" % (DEADLINE_MS, len(BODY))
    )
    writer.write(head + BODY)
    await asyncio.sleep(LEAVES_AT_S)
    assert [in_flight(r) for r in replicas] == [1, 1, 1]  # a try open on every replica
    ports = [r.port for r in replicas]
    held = established(*ports)  # among each replica's connections, the one carrying its try

    def closed() -> bool:
        now = established(*ports)
        return all(held[port] - now[port] for port in ports)

    writer.close()  # the client hangs up
    took = await stopped(closed)
    print(f"\nREST: the replicas' connections of the 3 tries closed {took} after")
    await wait_until_async(lambda: recorded(gateway.url)[0] == before[0] + 1, 5)
    _, failed, events = recorded(gateway.url)
    assert failed == before[1] + 1  # Triton's statistics: a failure
    assert events == before[2]  # neither good nor bad: no event at all


@pytest.fixture
def grpc_replicas(models_dir: Path) -> Iterator[list[ReplicaProcess]]:
    model = models_dir / "digits-mlp.onnx"
    started = [
        start_replica(model, name="digits-mlp", enable_faults=True, grpc=True) for _ in range(3)
    ]
    yield started
    for proc in started:
        proc.cleanup()


async def test_a_grpc_client_that_cancels_leaves_no_call_open_at_the_replicas(
    grpc_replicas: list[ReplicaProcess],
) -> None:
    config: dict[str, Any] = pool_config(grpc_replicas, slos=SLOS)
    config["pools"]["primary"]["replicas"] = [
        {"id": f"r{i}", "url": r.grpc_url} for i, r in enumerate(grpc_replicas)
    ]
    gateway = start_gateway(config, grpc=True)
    try:
        await warm_up_and_slow_down(gateway.url, grpc_replicas)
        before = recorded(gateway.url)
        request = pb.ModelInferRequest(model_name="digits")
        request.inputs.add(name="input", datatype="FP32", shape=[1, 64])
        request.raw_input_contents.append(np.array(ROW, dtype=np.float32).tobytes())
        async with grpc.aio.insecure_channel(gateway.grpc_url or "") as channel:
            call = Stub(channel).model_infer(request, timeout=DEADLINE_MS / 1000)
            await asyncio.sleep(LEAVES_AT_S)
            # the per-try race has a try on each replica (a loaded machine starts the last late)
            await wait_until_async(lambda: [in_flight(r) for r in grpc_replicas] == [1, 1, 1], 2.0)
            with httpx.Client(trust_env=False) as client:
                call.cancel()  # the client cancels its call
                took = await stopped(lambda: not any(in_flight(r, client) for r in grpc_replicas))
        print(f"\ngRPC: the replicas' 3 calls cancelled {took} after")
        await wait_until_async(lambda: recorded(gateway.url)[0] == before[0] + 1, 5)
        _, failed, events = recorded(gateway.url)
        assert failed == before[1] + 1
        assert events == before[2]
    finally:
        gateway.cleanup()

"""The in-flight byte budget on a real gateway: large bodies wait or get 503, memory stays bound.

Bounded and with generous margins (the timed figures are `loadtests/bench_pressure.py`'s): 16
clients send 6 MB binary images to a gateway whose ``server.inflight_bytes`` is 16 MiB, for
3 s, while the replica holds each answer 400 ms (longer than ``inflight_wait_s``, so that
whatever the machine's speed, two requests fill the budget and later ones cannot all wait their
turn). Every answer is a 200 or the budget's 503 with ``Retry-After``; the gateway's RSS never
passes its baseline + 8× the budget (the benchmark's bound is 2×), and comes back within 25 %
of the baseline once the load stops (the heap is trimmed after the budget drains).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.http1 import Http1Transport
from replicas.image_model import write_image_model
from tests.support.faults import clear_faults, inject_faults
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ReplicaProcess, start_replica, wait_until

pytestmark = pytest.mark.integration

BUDGET = 16 * 1024 * 1024
CLIENTS, SECONDS = 16, 3.0


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaProcess]:
    model = write_image_model(tmp_path_factory.mktemp("image"))
    proc = start_replica(model, name="image-gap", enable_faults=True)
    yield proc
    proc.cleanup()


@pytest.fixture(scope="module")
def gateway(replica: ReplicaProcess) -> Iterator[GatewayProcess]:
    config = {
        "server": {"inflight_bytes": BUDGET, "inflight_wait_s": 0.2},
        "pools": {"image": {"model": "image-gap", "replicas": [{"id": "i0", "url": replica.url}]}},
        "models": {"image": {"pool": "image", "timeout_ms": 10_000}},
    }
    proc = start_gateway(config)
    yield proc
    proc.cleanup()


def _batch() -> tuple[bytes, dict[str, str]]:
    images = np.random.default_rng(6).uniform(0, 1, (10, 3, 224, 224)).astype("<f4").tobytes()
    spec = {"name": "image", "shape": [10, 3, 224, 224], "datatype": "FP32",
            "parameters": {"binary_data_size": len(images)}}  # fmt: skip
    header = orjson.dumps({"inputs": [spec]})
    return header + images, {"inference-header-content-length": str(len(header))}


async def _load(url: str, body: bytes, headers: dict[str, str]) -> tuple[Counter[int], set[str]]:
    transport = Http1Transport()
    endpoint = Endpoint.parse(url)
    statuses: Counter[int] = Counter()
    retry_after: set[str] = set()
    stop = time.monotonic() + SECONDS

    async def client() -> None:
        while time.monotonic() < stop:
            reply = await transport.request(
                endpoint, "POST", "/v2/models/image/infer", body=body, headers=headers,
                timeout=30.0,
            )  # fmt: skip
            statuses[reply.status] += 1
            if reply.status == 503:
                retry_after.add(reply.headers.get("retry-after", ""))

    try:
        await asyncio.gather(*(client() for _ in range(CLIENTS)))
    finally:
        await transport.aclose()
    return statuses, retry_after


def test_large_bodies_wait_or_get_503_and_memory_stays_bound(
    replica: ReplicaProcess, gateway: GatewayProcess
) -> None:
    body, headers = _batch()
    asyncio.run(_load(gateway.url, body, headers))  # warm: the allocator's pools, connections
    inject_faults(replica.url, latency_ms=400)  # each answer holds its 6 MB in the budget
    baseline = _rss(gateway.pid)
    peak = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss(gateway.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        statuses, retry_after = asyncio.run(_load(gateway.url, body, headers))
    finally:
        done.set()
        sampler.join()
        clear_faults(replica.url)
    assert set(statuses) <= {200, 503} and statuses[200] > 0
    assert statuses[503] > 0 and retry_after == {"1"}  # 16 x 6 MB never fit in 16 MiB
    assert peak <= baseline + 8 * BUDGET, (baseline, peak)
    wait_until(lambda: _rss(gateway.pid) <= baseline * 1.25, timeout=10.0,
               message=lambda: f"RSS back near its baseline {baseline} (peak {peak}): "
                               f"{_rss(gateway.pid)}")  # fmt: skip

"""The in-flight bytes on a real gateway: large bodies wait or get 503, memory stays bound.

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
from prometheus_client.parser import text_string_to_metric_families

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.http1 import Http1Transport
from replicas.image_model import write_image_model
from tests.support.faults import clear_faults, inject_faults
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.h2_grpc import INFER, Ended, H2Client
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
    spec = {
        "name": "image",
        "shape": [10, 3, 224, 224],
        "datatype": "FP32",
        "parameters": {"binary_data_size": len(images)},
    }
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
                endpoint,
                "POST",
                "/v2/models/image/infer",
                body=body,
                headers=headers,
                timeout=30.0,
            )
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
    baseline = _rss(gateway.data_pid)
    peak = baseline
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _rss(gateway.data_pid))
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
    wait_until(
        lambda: _rss(gateway.data_pid) <= baseline * 1.25,
        timeout=10.0,
        message=lambda: (
            f"RSS back near its baseline {baseline} (peak {peak}): {_rss(gateway.data_pid)}"
        ),
    )


# --- clients that declare much and send nothing (a flood from another address) -------------

MIB = 1 << 20
ATTACKER = "127.0.0.2"  # another loopback address: another client
FLOOD_BUDGET = 32 * MIB  # server.inflight_bytes
FLOOD_MAX_BODY = MIB  # server.max_body_bytes: each silent body declares this much
SILENT_BODIES, HEADER_ONLY_CALLS = 48, 16
RESOURCE_EXHAUSTED = 8


@pytest.fixture(scope="module")
def digits(models_dir: Path) -> Iterator[ReplicaProcess]:
    proc = start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp")
    yield proc
    proc.cleanup()


@pytest.fixture(scope="module")
def flooded(digits: ReplicaProcess) -> Iterator[GatewayProcess]:
    config = {
        "server": {
            "inflight_bytes": FLOOD_BUDGET,
            "max_body_bytes": FLOOD_MAX_BODY,
            "inflight_wait_s": 0.5,
        },
        "pools": {
            "p": {
                "model": "digits-mlp",
                "version": "1",
                "replicas": [{"id": "r0", "url": digits.url}],
            }
        },
        "models": {"digits": {"pool": "p"}},
    }
    proc = start_gateway(config, grpc=True)
    yield proc
    proc.cleanup()


def _rows(rows: int) -> tuple[bytes, dict[str, str]]:
    """A digits request of ``rows`` rows: JSON for one row, binary tensors for more."""
    data = np.random.default_rng(rows).random((rows, 64), dtype=np.float32)
    spec: dict[str, object] = {"name": "input", "shape": [rows, 64], "datatype": "FP32"}
    if rows == 1:
        return orjson.dumps({"inputs": [{**spec, "data": data.ravel().tolist()}]}), {}
    spec["parameters"] = {"binary_data_size": data.nbytes}
    header = orjson.dumps({"inputs": [spec]})
    return header + data.tobytes(), {"inference-header-content-length": str(len(header))}


async def _silent_bodies(port: int) -> list[asyncio.StreamWriter]:
    """Connections from the attacker's address, each a request head declaring a body of
    ``FLOOD_MAX_BODY`` bytes, and not one byte of it."""
    head = b"POST /v2/models/digits/infer HTTP/1.1\r\nhost: gateway\r\n" + (
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % FLOOD_MAX_BODY
    )
    writers = []
    for _ in range(SILENT_BODIES):
        _, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))
        writer.write(head)
        writers.append(writer)
    return writers


async def _flood_in_place(transport: Http1Transport, endpoint: Endpoint) -> None:
    """Until the gateway's /metrics say the flood is in place: what fits holds and the rest
    was refused, none waiting (more is asked than fits: some is always refused)."""
    deadline = time.monotonic() + 20.0
    levels: dict[str, float] = {}
    while time.monotonic() < deadline:
        reply = await transport.request(endpoint, "GET", "/metrics", timeout=5.0)
        levels = {
            sample.name: sample.value
            for family in text_string_to_metric_families(reply.body.decode())
            for sample in family.samples
            if sample.name.startswith("gateway_inflight_")
        }
        if (
            levels["gateway_inflight_refused_total"]
            and not levels["gateway_inflight_waiting_requests"]
        ):
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"the flood not in place after 20 s: {levels}")


async def _flood_and_infer(gateway: GatewayProcess) -> tuple[Counter[int], list[Ended | None]]:
    assert gateway.grpc_port is not None
    silent = await _silent_bodies(gateway.port)
    h2 = H2Client("127.0.0.1", gateway.grpc_port, source=ATTACKER)
    await h2.__aenter__()
    calls = [h2.call(INFER, end=False) for _ in range(HEADER_ONLY_CALLS)]  # headers only
    transport = Http1Transport()
    endpoint = Endpoint.parse(gateway.url)
    await _flood_in_place(transport, endpoint)
    statuses: Counter[int] = Counter()
    small, large = _rows(1), _rows(512)  # ~1 KB JSON; 128 KiB binary, over the small size
    try:
        stop = time.monotonic() + 3.0
        while time.monotonic() < stop:
            for body, headers in (small, small, small, large):
                reply = await transport.request(
                    endpoint,
                    "POST",
                    "/v2/models/digits/infer",
                    body=body,
                    headers=headers,
                    timeout=10.0,
                )
                statuses[reply.status] += 1
        ends = [await h2.wait(sid, 0.1) for sid in calls]
    finally:
        await transport.aclose()
        await h2.__aexit__()
        for writer in silent:
            writer.close()
    return statuses, ends


def test_clients_that_declare_much_and_send_nothing_leave_room_for_the_others(
    flooded: GatewayProcess,
) -> None:
    """48 connections declaring 1 MiB bodies and 16 gRPC calls sending only their headers, all
    from 127.0.0.2, against a 32 MiB budget (once: 32 such bodies took all of it, and every
    other request waited, then got 503): a client at 127.0.0.1 is answered every time, small
    requests from the part kept for them, larger ones with room taken back from the calls
    that never sent a message."""
    statuses, ends = asyncio.run(_flood_and_infer(flooded))
    assert set(statuses) == {200} and statuses[200] >= 8, statuses
    reclaimed = [e for e in ends if e is not None and "another client" in e.message]
    assert reclaimed and all(e.code == RESOURCE_EXHAUSTED for e in reclaimed)

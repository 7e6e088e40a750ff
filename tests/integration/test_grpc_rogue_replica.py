"""A gRPC replica whose infer replies are not protobuf, beside an honest gRPC replica, behind a
real gateway: every client request, REST or through the gRPC door, gets the honest answer, and
the rogue is charged (a protocol error, as garbage from a REST replica) until it is ejected."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import pytest

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ManagedProcess, free_port, start_replica, wait_until
from tests.support.traffic import request_bodies
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import Stub

pytestmark = pytest.mark.integration


@pytest.fixture
def gateway(models_dir: Path) -> Iterator[GatewayProcess]:
    honest = start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp", grpc=True)
    port = free_port()
    rogue = ManagedProcess(
        [sys.executable, "-m", "tests.support.rogue_grpc_replica", "--port", str(port)],
        name="rogue-grpc",
    )
    try:
        wait_until(
            lambda: "listening" in rogue.log_text() or not rogue.alive(), 20, message=rogue.log_text
        )
        assert rogue.alive(), rogue.log_text()
        config = {
            "pools": {
                "primary": {
                    "model": "digits-mlp",
                    "version": "1",
                    "replicas": [
                        {"id": "honest", "url": honest.grpc_url},
                        {"id": "rogue", "url": f"grpc://127.0.0.1:{port}"},
                    ],
                }
            },
            "models": {"digits": {"pool": "primary"}},
        }
        proc = start_gateway(config, grpc=True)
        try:
            yield proc
        finally:
            proc.cleanup()
    finally:
        rogue.cleanup()
        honest.cleanup()


def rogue_state(gateway: GatewayProcess) -> dict[str, Any]:
    state = httpx.get(f"{gateway.url}/admin/state", trust_env=False, timeout=5).json()
    replicas = {r["id"]: r for pool in state["pools"] for r in pool["replicas"]}
    return dict(replicas["rogue"])


async def rest_requests(url: str, count: int) -> list[tuple[int, str | None, str]]:
    bodies = request_bodies(8)
    async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=10) as client:
        sem = asyncio.Semaphore(4)

        async def one(i: int) -> tuple[int, str | None, str]:
            async with sem:
                reply = await client.post("/v2/models/digits/infer", content=bodies[i % 8])
                return reply.status_code, reply.headers.get("x-served-by"), reply.text

        return await asyncio.gather(*(one(i) for i in range(count)))


async def grpc_requests(target: str, count: int) -> list[tuple[str, str]]:
    """(code name, x-served-by) of ``count`` ModelInfer calls through the gateway's door."""
    rows = np.random.default_rng(0).random((2, 64), dtype=np.float32)
    request = pb.ModelInferRequest(model_name="digits")
    request.inputs.add(name="input", datatype="FP32", shape=[2, 64])
    request.raw_input_contents.append(rows.tobytes())
    async with grpc.aio.insecure_channel(target) as channel:
        stub = Stub(channel)

        async def one() -> tuple[str, str]:
            call = stub.model_infer(request, timeout=10)
            try:
                await call
            except grpc.aio.AioRpcError as exc:
                return exc.code().name, exc.details() or ""
            served = dict(await call.trailing_metadata() or ()).get("x-served-by", "")
            return "OK", str(served)

        return await asyncio.gather(*(one() for _ in range(count)))


async def test_garbage_grpc_replies_are_the_rogues_fault_never_the_clients(
    gateway: GatewayProcess,
) -> None:
    assert gateway.grpc_url is not None
    rest = await rest_requests(gateway.url, 30)
    door = await grpc_requests(gateway.grpc_url, 20)
    failed = [r for r in rest if r[0] != 200 or r[1] != "honest"]
    failed += [(0, served, code) for code, served in door if (code, served) != ("OK", "honest")]
    assert not failed, failed[:3]
    state = rogue_state(gateway)
    print(f"rogue: tried {state['requests']} times, {state['failures']} charged; {state}")
    assert state["failures"] >= 1, state
    assert state["requests"] <= 15, state  # out of the pool after a few, not a share
    assert state["ejected"] or state["breaker"]["state"] == "open", state

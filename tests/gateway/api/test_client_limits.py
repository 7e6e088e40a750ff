"""What one client's big or malformed input gets at the edge, in-process (ASGI, fake upstream).

Bodies over the limit get 413, rows over the model's limit 400, parameters that are not
objects and non-finite numbers a precise 400 (the vote route used to answer 500, and NaN
inputs a 200 with ``null`` outputs); bodies over the inline limit are parsed in a worker
process, which may die without the request failing.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import AsyncIterator
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.config import GatewayConfig, parse_config
from gateway.control.runtime import Gateway
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import FakeTransport, with_echoed_id
from tests.support.processes import wait_until

ROW = [0.25] * 64
LABEL = {"name": "label", "datatype": "INT64", "shape": [1], "data": [3]}
PORTS = {"a": 9100, "b": 9200, "c": 9300}


def config(**server: Any) -> GatewayConfig:
    pools = {
        name: {"model": "digits-mlp", "replicas": [{"id": name, "url": f"http://127.0.0.1:{port}"}]}
        for name, port in PORTS.items()
    }
    return parse_config(
        {
            "server": {"max_body_bytes": 64 * 1024, **server},
            "pools": pools,
            "models": {
                "digits": {"pool": "a", "max_rows": 16},
                "digits-vote": {"vote": {"pools": list(PORTS), "quorum": 2}, "max_rows": 16},
            },
        }
    )


class Upstream(FakeTransport):
    """Ready replicas that answer every infer with one label, remembering the payloads."""

    def __init__(self) -> None:
        super().__init__()
        self.payloads: list[bytes] = []
        for port in PORTS.values():
            self.behaviours[f"127.0.0.1:{port}"] = self._answer

    async def _answer(self, method: str, path: str, payload: bytes) -> Reply:
        if method == "GET":
            return Reply(200, {}, b"{}")
        self.payloads.append(payload)
        answer = orjson.dumps({"model_name": "m", "outputs": [LABEL]})
        return Reply(200, {}, with_echoed_id(payload, answer))


async def started(gateway_config: GatewayConfig) -> tuple[GatewayApp, Upstream]:
    upstream = Upstream()
    gateway = Gateway(gateway_config, transport=upstream, rng=random.Random(0))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    return GatewayApp(gateway), upstream


@pytest.fixture
async def app() -> AsyncIterator[tuple[httpx.AsyncClient, Upstream]]:
    gateway_app, upstream = await started(config())
    transport = httpx.ASGITransport(app=gateway_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        yield client, upstream
    await gateway_app.gateway.stop()
    await gateway_app.parser.close()


def request(rows: int = 1, **extra: Any) -> dict[str, Any]:
    data = ROW if rows == 1 else [ROW] * rows
    tensor = {"name": "input", "shape": [rows, 64], "datatype": "FP32", "data": data}
    return {"inputs": [tensor], **extra}


async def test_a_body_over_the_limit_is_413_declared_or_streamed(
    app: tuple[httpx.AsyncClient, Upstream],
) -> None:
    client, upstream = app
    big = b"x" * (64 * 1024 + 1)
    declared = await client.post("/v2/models/digits/infer", content=big)
    assert declared.status_code == 413
    assert declared.json() == {"error": "request body over 65536 bytes"}

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b" " * 20_000

    streamed = await client.post("/v2/models/digits/infer", content=chunks())
    assert streamed.status_code == 413 and "over 65536 bytes" in streamed.json()["error"]
    assert upstream.payloads == []


async def test_rows_over_the_models_limit_are_400(app: tuple[httpx.AsyncClient, Upstream]) -> None:
    client, upstream = app
    assert (await client.post("/v2/models/digits/infer", json=request(16))).status_code == 200
    response = await client.post("/v2/models/digits/infer", json=request(17))
    assert response.status_code == 400
    assert response.json()["error"] == (
        "input 'input': 17 rows; this model takes at most 16 rows a request"
    )
    assert len(upstream.payloads) == 1


@pytest.mark.parametrize("model", ["digits", "digits-vote"])
@pytest.mark.parametrize("parameters", ["abc", 5, [["binary_data_output", True]]])
async def test_parameters_that_are_not_an_object_are_400_on_both_routes(
    app: tuple[httpx.AsyncClient, Upstream], model: str, parameters: Any
) -> None:
    client, upstream = app
    response = await client.post(f"/v2/models/{model}/infer", json=request(parameters=parameters))
    assert response.status_code == 400  # the vote route answered 500 here
    assert response.json()["error"].startswith("'parameters' must be an object, not ")
    assert upstream.payloads == []


async def test_non_finite_inputs_are_400_before_any_replica_sees_them(
    app: tuple[httpx.AsyncClient, Upstream],
) -> None:
    client, upstream = app
    overflow = request()
    overflow["inputs"][0]["data"] = [*ROW[:63], 1e39]  # inf as FP32
    response = await client.post("/v2/models/digits/infer", json=overflow)
    assert response.status_code == 400
    assert response.json()["error"] == (
        "input 'input': 1e+39 is outside the FP32 range (it would be infinity)"
    )
    values = np.full((1, 64), 0.5, dtype=np.float32)
    values[0, 3] = np.nan
    head = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": [1, 64],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 256},
                }
            ]
        }
    )
    response = await client.post(
        "/v2/models/digits-vote/infer",
        content=head + values.tobytes(),
        headers={"inference-header-content-length": str(len(head))},
    )
    assert response.status_code == 400
    assert "binary FP32 data holds NaN or infinity (1 values)" in response.json()["error"]
    assert upstream.payloads == []


async def test_large_bodies_are_parsed_in_a_worker_process_which_may_die() -> None:
    # the fast JSON path off: these bodies of floats would be checked inline by it
    gateway_app, upstream = await started(
        config(parse_inline_max_bytes=1024, parse_fast_inline_max_bytes=0)
    )
    transport = httpx.ASGITransport(app=gateway_app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            assert (
                await client.post("/v2/models/digits/infer", json=request(1))
            ).status_code == 200
            # small: parsed inline, no parse process yet
            assert gateway_app.parser.process_pids() == []
            # the first large body starts the worker process: seconds on a busy machine
            slow_start = {"x-request-timeout-ms": "30000"}
            ok = await client.post("/v2/models/digits/infer", json=request(8), headers=slow_start)
            assert ok.status_code == 200, ok.text
            (pid,) = gateway_app.parser.process_pids()
            bad = request(8)
            bad["inputs"][0]["data"][5] = [*ROW[:63], 1e39]
            refused = await client.post("/v2/models/digits/infer", json=bad)
            assert refused.status_code == 400 and "outside the FP32 range" in refused.text
            many = await client.post("/v2/models/digits/infer", json=request(17))
            assert many.status_code == 400 and "at most 16 rows" in many.text

            # a vote rewrites a request asking for binary outputs: from the whole body
            binary = request(8, parameters={"binary_data_output": True}, id="v1")
            voted = await client.post("/v2/models/digits-vote/infer", json=binary)
            assert voted.status_code == 200, voted.text
            legs = [orjson.loads(p) for p in upstream.payloads[-3:]]
            assert all(leg["inputs"][0]["data"] == [ROW] * 8 for leg in legs)
            # each leg carries the client's id made unique; the client gets its own back
            assert all("parameters" not in leg and leg["id"].startswith("v1~") for leg in legs)
            head = voted.content[: int(voted.headers["inference-header-content-length"])]
            assert orjson.loads(head)["id"] == "v1"

            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: not _alive(pid), 10.0, message=f"worker {pid} to die")
            again = await client.post(
                "/v2/models/digits/infer", json=request(8), headers=slow_start
            )
            assert again.status_code == 200, again.text  # inline, or by a fresh worker
            after = await client.post(
                "/v2/models/digits/infer", json=request(8), headers=slow_start
            )
            assert after.status_code == 200
            (new_pid,) = gateway_app.parser.process_pids()
            assert new_pid != pid
    finally:
        await gateway_app.gateway.stop()
        await gateway_app.parser.close()
    assert gateway_app.parser.process_pids() == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped while read
        return False

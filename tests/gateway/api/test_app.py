"""The gateway's HTTP surface in-process (ASGI) on a fake upstream: contracts and errors."""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.control.runtime import Gateway
from gateway.upstream.transport.base import Reply
from tests.gateway.conftest import make_config
from tests.gateway.fakes import Behaviour, FakeTransport, reply

ROW = [0.0] * 64
REQUEST = {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": ROW}]}
REPLY = orjson.dumps(
    {
        "model_name": "digits-mlp",
        "model_version": "1",
        "outputs": [{"name": "label", "shape": [1], "datatype": "INT64", "data": [3]}],
    }
)
METADATA = orjson.dumps(
    {
        "name": "digits-mlp",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [],
        "outputs": [],
    }
)


class Upstream(FakeTransport):
    """Answers metadata GETs with METADATA and readiness with 200; infer as scripted."""

    def __init__(self) -> None:
        super().__init__()
        self.infer: Behaviour = reply(200, REPLY)

    def script(self, infer: Behaviour) -> None:
        self.infer = infer
        for port in range(9000, 9003):
            self.behaviours[f"127.0.0.1:{port}"] = self._route

    async def _route(self, method: str, path: str, payload: bytes) -> Reply:
        if method == "GET":
            return Reply(200, {}, b"{}" if path.endswith("/ready") else METADATA)
        return await self.infer(method, path, payload)


@pytest.fixture
async def upstream() -> Upstream:
    transport = Upstream()
    transport.script(reply(200, REPLY))
    return transport


@pytest.fixture
async def client(upstream: Upstream) -> AsyncIterator[httpx.AsyncClient]:
    gateway = Gateway(make_config(), transport=upstream, rng=random.Random(0))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    transport = httpx.ASGITransport(app=GatewayApp(gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http
    await gateway.stop()


async def test_infer_without_content_type(client: httpx.AsyncClient) -> None:
    response = await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
    assert response.status_code == 200
    body = response.json()
    assert body["model_name"] == "digits" and body["outputs"][0]["data"] == [3]
    assert response.headers["x-served-by"] in {"r0", "r1", "r2"}
    assert response.headers["x-attempts"] == "1"


async def test_versioned_infer_and_unknown_version(client: httpx.AsyncClient) -> None:
    ok = await client.post("/v2/models/digits/versions/1/infer", json=REQUEST)
    assert ok.status_code == 200
    missing = await client.post("/v2/models/digits/versions/9/infer", json=REQUEST)
    assert missing.status_code == 404
    assert "no version '9'" in missing.json()["error"]


async def test_unknown_model_is_404_json(client: httpx.AsyncClient) -> None:
    response = await client.post("/v2/models/nope/infer", json=REQUEST)
    assert response.status_code == 404
    assert response.json() == {"error": "model 'nope' not found"}


@pytest.mark.parametrize(
    ("content", "headers", "status", "message"),
    [
        (b"{bad", {}, 400, "not valid JSON"),
        (b'{"inputs": []}', {}, 400, "'inputs'"),
        (orjson.dumps(REQUEST), {"x-request-timeout-ms": "soon"}, 400, "x-request-timeout-ms"),
    ],
)
async def test_bad_input_is_a_precise_4xx(
    client: httpx.AsyncClient, content: bytes, headers: dict[str, str], status: int, message: str
) -> None:
    response = await client.post("/v2/models/digits/infer", content=content, headers=headers)
    assert response.status_code == status
    assert message in response.json()["error"]


async def test_replica_503s_become_503_json(client: httpx.AsyncClient, upstream: Upstream) -> None:
    upstream.script(reply(503, b'{"error": "overloaded"}'))
    response = await client.post("/v2/models/digits/infer", json=REQUEST)
    assert response.status_code == 503
    error = response.json()["error"]  # the replica's words are not relayed, its status is
    assert error.endswith("replica r0 answered 503: unavailable") and "overloaded" not in error
    assert "retry-after" in response.headers


async def test_the_same_500_from_two_working_replicas_is_the_requests_fault(
    client: httpx.AsyncClient, upstream: Upstream
) -> None:
    for _ in range(6):  # every replica has answered something well
        assert (await client.post("/v2/models/digits/infer", json=REQUEST)).status_code == 200
    upstream.script(reply(500, b'{"error": "boom on this input"}'))
    response = await client.post("/v2/models/digits/infer", json=REQUEST)
    assert response.status_code == 400
    error = response.json()["error"]  # their status in fixed words, not their text
    assert re.search(r"\(500\): replica r\d answered 500: internal error$", error), error
    assert response.headers["x-attempts"] == "3"  # a 5xx needs three witnesses, then no more


async def test_health_and_server_metadata(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v2/health/live")).status_code == 200
    assert (await client.get("/v2/health/ready")).json()["ready"] is True
    assert (await client.get("/v2/models/digits/ready")).status_code == 200
    assert (await client.get("/v2/models/digits/versions/1/ready")).status_code == 200
    assert (await client.get("/v2/models/nope/ready")).status_code == 404
    server = (await client.get("/v2")).json()
    assert server["name"] == "v2-gateway" and "binary_tensor_data" in server["extensions"]


async def test_model_metadata_is_renamed(client: httpx.AsyncClient, upstream: Upstream) -> None:
    metadata = (await client.get("/v2/models/digits")).json()
    assert metadata["name"] == "digits" and metadata["versions"] == ["1"]
    assert (await client.get("/v2/models/digits/versions/2")).status_code == 404


async def test_unknown_paths_and_methods_are_json(client: httpx.AsyncClient) -> None:
    missing = await client.get("/nowhere")
    assert missing.status_code == 404 and "error" in missing.json()
    wrong = await client.get("/v2/models/digits/infer")
    assert wrong.status_code in (404, 405) and "error" in wrong.json()


async def test_admin_state_lists_replicas(client: httpx.AsyncClient) -> None:
    state = (await client.get("/admin/state")).json()
    replicas = state["pools"][0]["replicas"]
    assert [r["id"] for r in replicas] == ["r0", "r1", "r2"]
    assert {"url", "outstanding", "healthy", "last_error"} <= set(replicas[0])

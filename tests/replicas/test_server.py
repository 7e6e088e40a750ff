"""The ASGI app in-process (httpx.ASGITransport) with the committed fallback ONNX model."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from replicas.asgi import Message
from replicas.dataset import Split
from replicas.errors import InferenceFailed
from replicas.fault_auth import FaultKey
from replicas.faults import CRASH_EXIT_CODE, FaultInjector
from replicas.model import OnnxModel
from replicas.server import ReplicaApp
from tests.support.faults import (
    FAULT_KEY,
    clear_faults_async,
    fault_headers,
    inject_faults_async,
)
from tests.support.processes import wait_until_async
from v2proto.codec import HEADER_LENGTH, decode_infer_response, encode_infer_request
from v2proto.signature import Array

INFER = "/v2/models/digits/infer"
Client = httpx.AsyncClient
MakeApp = Callable[..., Awaitable[tuple[ReplicaApp, Client]]]


async def no_sleep(seconds: float) -> None:
    return None


@pytest.fixture
async def make_app(model_path: Path) -> AsyncIterator[MakeApp]:
    made: list[tuple[ReplicaApp, Client]] = []

    async def factory(start: bool = True, **kwargs: Any) -> tuple[ReplicaApp, Client]:
        app = ReplicaApp(kwargs.pop("model", model_path), name="digits", **kwargs)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r")
        made.append((app, client))
        if start:
            await app.startup()
        return app, client

    yield factory
    for app, client in made:
        await client.aclose()
        await app.shutdown()


@pytest.fixture
async def client(make_app: MakeApp) -> Client:
    return (await make_app())[1]


def json_body(x: Array, **extra: Any) -> bytes:
    tensor = {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
    return orjson.dumps({"inputs": [tensor], **extra})


# ----------------------------------------------------------------------------- metadata, health


async def test_server_metadata_and_health(client: Client) -> None:
    r = await client.get("/v2")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"name": "replica", "version": "0.1.0", "extensions": ["binary_tensor_data"]}
    assert (await client.get("/v2/health/live")).json() == {"live": True}
    r = await client.get("/v2/health/ready")
    assert (r.status_code, r.json()) == (200, {"ready": True})


@pytest.mark.parametrize("prefix", ["/v2/models/digits", "/v2/models/digits/versions/1"])
async def test_model_metadata_and_ready(client: Client, prefix: str) -> None:
    doc = (await client.get(prefix)).json()
    assert doc == {
        "name": "digits",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [
            {"name": "label", "datatype": "INT64", "shape": [-1]},
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
        ],
        "parameters": {"execution_provider": "CPUExecutionProvider", "requested_device": "cpu"},
    }
    r = await client.get(f"{prefix}/ready")
    assert (r.status_code, r.json()) == (200, {"name": "digits", "ready": True})


@pytest.mark.parametrize(
    ("method", "path", "status", "error"),
    [
        ("GET", "/v2/models/nope", 404, "model 'nope' not found"),
        ("POST", "/v2/models/nope/infer", 404, "model 'nope' not found"),
        ("GET", "/v2/models/digits/versions/2", 404, "version '2' of model 'digits' not found"),
        ("POST", "/v2/models/digits/versions/2/infer", 404, "version '2' of model 'digits'"),
        ("GET", "/v2/models/digits/explain", 404, "no route"),
        ("GET", "/nowhere", 404, "no route for /nowhere"),
        ("POST", "/admin/faults", 404, "no route for /admin/faults"),
        ("GET", INFER, 405, "use POST"),
        ("POST", "/v2/health/ready", 405, "use GET"),
    ],
)
async def test_errors_are_json(
    client: Client, method: str, path: str, status: int, error: str
) -> None:
    r = await client.request(method, path, content=b"{}")
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert error in r.json()["error"]


# ----------------------------------------------------------------------------- inference


async def test_infer_json(client: Client, onnx_model: OnnxModel, split: Split) -> None:
    x = split.X_test[:3]
    r = await client.post(
        INFER, content=json_body(x, id="abc")
    )  # no content-type, like tritonclient
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert HEADER_LENGTH not in r.headers
    doc = r.json()
    assert (doc["model_name"], doc["model_version"], doc["id"]) == ("digits", "1", "abc")
    assert [o["name"] for o in doc["outputs"]] == ["label", "probabilities"]
    expected = onnx_model.run({"input": x})
    assert doc["outputs"][0]["data"] == expected["label"].tolist()
    assert doc["outputs"][1]["shape"] == [3, 10]
    np.testing.assert_allclose(
        doc["outputs"][1]["data"], expected["probabilities"].ravel(), rtol=1e-6
    )


async def test_infer_nested_data_and_requested_output(client: Client, split: Split) -> None:
    x = split.X_test[:2]
    r = await client.post(INFER, content=json_body(x, outputs=[{"name": "label"}]))
    doc = r.json()
    assert [o["name"] for o in doc["outputs"]] == ["label"]
    assert "id" not in doc


async def test_infer_binary_both_ways(client: Client, onnx_model: OnnxModel, split: Split) -> None:
    x = split.X_test[:5]
    req = encode_infer_request(
        {"input": x}, ["probabilities", "label"], binary_inputs=True, binary_outputs=True
    )
    r = await client.post(INFER, content=req.body, headers={HEADER_LENGTH: str(req.json_length)})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    decoded = decode_infer_response(r.content, r.headers[HEADER_LENGTH])
    assert list(decoded.outputs) == ["probabilities", "label"]
    np.testing.assert_array_equal(decoded.outputs["label"], onnx_model.run({"input": x})["label"])


async def test_infer_binary_output_parameter(client: Client, split: Split) -> None:
    body = json_body(split.X_test[:1], parameters={"binary_data_output": True})
    r = await client.post(INFER, content=body)
    head = orjson.loads(r.content[: int(r.headers[HEADER_LENGTH])])
    assert [o["parameters"]["binary_data_size"] for o in head["outputs"]] == [8, 40]


async def test_large_batch(client: Client, split: Split) -> None:
    r = await client.post(INFER, content=json_body(split.X_test))
    assert r.status_code == 200
    assert r.json()["outputs"][0]["shape"] == [450]


async def test_bad_request_is_400_and_counted(client: Client) -> None:
    r = await client.post(
        INFER,
        content=b'{"inputs": [{"name": "input", "shape": [1, 64], '
        b'"datatype": "FP32", "data": [1, 2]}]}',
    )
    assert r.status_code == 400
    assert r.json() == {"error": "input 'input': 'data' has 2 elements, shape [1, 64] needs 64"}
    metrics = (await client.get("/metrics")).text
    assert 'replica_requests_total{code="400",model="digits",version="1"} 1.0' in metrics


async def test_body_limit_is_413(make_app: MakeApp, split: Split) -> None:
    _, client = await make_app(max_body_bytes=1000)
    r = await client.post(INFER, content=json_body(split.X_test[:10]))
    assert r.status_code == 413 and "exceeds the 1000-byte limit" in r.json()["error"]


async def test_metrics_count_rows(client: Client, split: Split) -> None:
    await client.post(INFER, content=json_body(split.X_test[:4]))
    r = await client.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain")
    assert 'replica_inference_rows_total{model="digits",version="1"} 4.0' in r.text
    assert 'replica_ready{model="digits",version="1"} 1.0' in r.text


# ----------------------------------------------------------------------------- readiness, failures


async def test_not_ready_until_loaded(make_app: MakeApp, split: Split) -> None:
    app, client = await make_app(start=False)
    r = await client.get("/v2/health/ready")
    assert (r.status_code, r.json()) == (503, {"ready": False, "error": "model is loading"})
    assert (await client.get("/v2/models/digits/ready")).status_code == 503
    assert (await client.get("/v2/models/digits")).status_code == 503
    r = await client.post(INFER, content=json_body(split.X_test[:1]))
    assert r.status_code == 503 and "not ready" in r.json()["error"]
    await app.startup()
    assert (await client.get("/v2/health/ready")).status_code == 200


async def test_load_failure_keeps_it_unready(make_app: MakeApp, tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not an onnx model")
    _, client = await make_app(model=broken)
    r = await client.get("/v2/health/ready")
    assert r.status_code == 503 and r.json()["error"].startswith("model failed to load")


async def test_draining_is_unready_but_finishes_work(make_app: MakeApp, split: Split) -> None:
    app, client = await make_app()
    app.begin_shutdown()
    r = await client.get("/v2/health/ready")
    assert (r.status_code, r.json()["error"]) == (503, "shutting down")
    assert (await client.post(INFER, content=json_body(split.X_test[:1]))).status_code == 200


class FailingModel(OnnxModel):
    error: Exception = RuntimeError("boom")

    def run(self, inputs: Any) -> dict[str, Array]:
        if inputs["input"].shape[0] > 1:  # let batch-1 warm-up pass
            raise self.error
        return super().run(inputs)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (InferenceFailed("inference failed: bad node"), "inference failed: bad node"),
        (RuntimeError("boom"), "internal error: boom"),
    ],
)
async def test_inference_exceptions_are_500_json(
    make_app: MakeApp, split: Split, error: Exception, message: str
) -> None:
    class Model(FailingModel):
        pass

    Model.error = error
    _, client = await make_app(loader=Model)
    r = await client.post(INFER, content=json_body(split.X_test[:2]))
    assert (r.status_code, r.json()) == (500, {"error": message})


async def test_lifespan_loads_in_background(model_path: Path) -> None:
    app = ReplicaApp(model_path, name="digits")
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    outbox: asyncio.Queue[Message] = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await asyncio.wait_for(outbox.get(), 5))["type"] == "lifespan.startup.complete"
    await wait_until_async(
        lambda: app.not_ready_reason() is None,
        30,
        message=lambda: f"the model to load in the background: {app.not_ready_reason()}",
    )
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await asyncio.wait_for(outbox.get(), 5))["type"] == "lifespan.shutdown.complete"
    await asyncio.wait_for(task, 5)
    assert app.not_ready_reason() == "shutting down"


# ----------------------------------------------------------------------------- fault admin


@pytest.fixture
async def faulty(make_app: MakeApp) -> tuple[ReplicaApp, Client, list[int]]:
    exits: list[int] = []
    injector = FaultInjector(random.Random(0), sleep=no_sleep, exit=exits.append)
    app, client = await make_app(faults=injector, fault_key=FaultKey(FAULT_KEY))
    return app, client, exits


async def test_admin_get_post_delete(faulty: tuple[ReplicaApp, Client, list[int]]) -> None:
    _, client, _ = faulty
    headers = fault_headers()
    assert (await client.get("/admin/faults", headers=headers)).json()["latency_ms"] == 0
    await inject_faults_async(client, latency_ms=20)
    r = await inject_faults_async(client, error_rate=0.25)
    assert r.json() == {
        "latency_ms": 20.0,
        "error_rate": 0.25,
        "hang": False,
        "corrupt_rate": 0.0,
        "ready": True,
        "poison_value": None,
        "wrong_id": False,
        "accelerator": None,  # no accelerator readings injected
    }
    faults = (await client.get("/metrics")).text
    assert 'replica_faults_active{fault="latency_ms",model="digits",version="1"} 1.0' in faults
    assert (await clear_faults_async(client)).json()["latency_ms"] == 0
    assert (await client.get("/admin/faults", headers=headers)).json()["error_rate"] == 0


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{", "malformed JSON"),
        (b'{"error_rate": 2}', "'error_rate' must be between 0 and 1"),
        (b'{"bogus": 1}', "unknown fault 'bogus'"),
    ],
)
async def test_admin_validation(
    faulty: tuple[ReplicaApp, Client, list[int]], body: bytes, error: str
) -> None:
    headers = {**fault_headers(), "content-type": "application/json"}
    r = await faulty[1].post("/admin/faults", content=body, headers=headers)
    assert r.status_code == 400 and error in r.json()["error"]


async def test_error_rate_fault(faulty: tuple[ReplicaApp, Client, list[int]], split: Split) -> None:
    client = faulty[1]
    await inject_faults_async(client, error_rate=1)
    r = await client.post(INFER, content=json_body(split.X_test[:1]))
    assert (r.status_code, r.json()) == (500, {"error": "injected fault"})


async def test_poison_value_fault(
    faulty: tuple[ReplicaApp, Client, list[int]], split: Split
) -> None:
    """A 500 to a request holding the value, and answers to every other (a poison input)."""
    client = faulty[1]
    await inject_faults_async(client, poison_value=99.5)
    x = split.X_test[:2].copy()
    assert (await client.post(INFER, content=json_body(x))).status_code == 200
    x[1, 3] = 99.5
    r = await client.post(INFER, content=json_body(x))
    assert r.status_code == 500
    assert r.json() == {"error": "injected fault: cannot take the value 99.5"}


async def test_corrupt_fault(
    faulty: tuple[ReplicaApp, Client, list[int]], onnx_model: OnnxModel, split: Split
) -> None:
    client = faulty[1]
    x = split.X_test[:20]
    await inject_faults_async(client, corrupt_rate=1)
    r = await client.post(INFER, content=json_body(x))
    outputs = {o["name"]: np.array(o["data"]).reshape(o["shape"]) for o in r.json()["outputs"]}
    assert np.all(outputs["label"] != onnx_model.run({"input": x})["label"])
    np.testing.assert_array_equal(outputs["probabilities"].argmax(axis=1), outputs["label"])


async def test_ready_fault(faulty: tuple[ReplicaApp, Client, list[int]], split: Split) -> None:
    client = faulty[1]
    await inject_faults_async(client, ready=False)
    assert (await client.get("/v2/health/ready")).status_code == 503
    assert (await client.get("/v2/models/digits/ready")).json()["ready"] is False
    assert (await client.post(INFER, content=json_body(split.X_test[:1]))).status_code == 200


async def test_hang_fault(faulty: tuple[ReplicaApp, Client, list[int]], split: Split) -> None:
    client = faulty[1]
    await inject_faults_async(client, hang=True)
    pending = asyncio.create_task(client.post(INFER, content=json_body(split.X_test[:1])))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not pending.done()
    await clear_faults_async(client)
    assert (await asyncio.wait_for(pending, 5)).status_code == 200


async def test_crash_fault(faulty: tuple[ReplicaApp, Client, list[int]]) -> None:
    _, client, exits = faulty
    r = await inject_faults_async(client, crash=True)
    assert r.status_code == 202 and r.json()["crash"] is True
    await wait_until_async(lambda: bool(exits), 5, message="the injected crash to exit")
    assert exits == [CRASH_EXIT_CODE]


async def test_request_cancelled_by_shutdown_gets_a_json_503(
    faulty: tuple[ReplicaApp, Client, list[int]], split: Split
) -> None:
    app, client, _ = faulty
    await inject_faults_async(client, hang=True)
    body = json_body(split.X_test[:1])
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": INFER, "headers": []}
    task = asyncio.create_task(app(scope, receive, send))
    await wait_until_async(
        lambda: (
            'replica_requests_in_flight{model="digits",version="1"} 1.0'
            in app.metrics.render().decode()
        ),
        5,
        message="the request to be in flight",
    )
    task.cancel()  # what uvicorn does when the graceful shutdown times out
    await asyncio.wait_for(task, 5)
    assert sent[0]["status"] == 503
    assert orjson.loads(sent[1]["body"]) == {"error": "replica shut down before answering"}
    metrics = app.metrics.render().decode()
    assert 'replica_requests_total{code="503",model="digits",version="1"} 1.0' in metrics


async def test_an_input_that_overflows_the_model_is_a_400_not_nulls(client: Client) -> None:
    """Finite FP32 values of the largest magnitude make the softmax NaN: JSON would carry it
    as null (not V2 tensor data) and the label would mean nothing, so it is refused."""
    x = np.full((1, 64), 3.4e38, dtype=np.float32)
    x[0, ::2] *= -1
    for binary in (False, True):
        encoded = encode_infer_request({"input": x}, binary_outputs=binary)
        r = await client.post(INFER, content=encoded.body)
        assert r.status_code == 400, r.text
        assert "'probabilities' is not finite" in r.json()["error"]

"""The gRPC front door on a real gateway process, called with ``tritonclient.grpc`` (issue 22):
health and metadata, infer with typed and with raw contents (the same answer as REST's), a vote
and a fallback answer saying so, and each refusal with its code."""

from __future__ import annotations

import asyncio
import queue
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson
import pytest
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from replicas.dataset import load_split
from tests.support.faults import inject_faults
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.processes import ReplicaProcess, free_port, start_replica, wait_until
from v2proto.grpc.wire import SPLIT_MIN_BYTES

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
GLOBEX = "globex-Gr7Pc2Wq9Lm4Xv"  # 2 requests, then 1 per 5 s
BODY_LIMIT = 2 * 1024 * 1024
ROWS = load_split()[1][:3].astype(np.float32)  # real digits: the vote's models agree on them


def _config(
    mlp: ReplicaProcess, svm: ReplicaProcess, forest: ReplicaProcess, slow: ReplicaProcess
) -> dict[str, Any]:
    def pool(model: str, replica: str, rid: str) -> dict[str, Any]:
        return {"model": model, "replicas": [{"id": rid, "url": replica}]}

    return {
        "fallback_manifest": str(ROOT / "fallback_models" / "MANIFEST.json"),
        "pools": {
            "mlp": pool("digits-mlp", mlp.url, "mlp-0"),
            "svm": pool("digits-svm", svm.url, "svm-0"),
            "forest": pool("digits-forest", forest.url, "forest-0"),
            "slow": pool("digits-mlp", slow.url, "slow-0"),
            "gone": pool("digits-mlp", f"http://127.0.0.1:{free_port()}", "gone-0"),
        },
        "models": {
            "digits": {"pool": "mlp"},
            "digits-vote": {
                "vote": {"pools": ["mlp", "svm", "forest"], "quorum": 2},
                "timeout_ms": 3000,
            },
            "digits-fallback": {"pool": "gone", "fallback": {"model": "digits-logreg"}},
            "digits-slow": {"pool": "slow", "timeout_ms": 5000},
            "digits-keyed": {"pool": "mlp", "auth": {"require_key": True}},
        },
        "tenants": {"globex": {"key_env": "GW_TEST_GLOBEX_KEY", "rate_per_s": 0.2, "burst": 2}},
        "server": {"max_body_bytes": BODY_LIMIT},
    }


@pytest.fixture(scope="module")
def gateway(models_dir: Path) -> Iterator[GatewayProcess]:
    started: list[ReplicaProcess] = []
    try:
        for model in ("digits-mlp", "digits-svm", "digits-forest", "digits-mlp"):
            onnx = models_dir / f"{model}.onnx"
            started.append(start_replica(onnx, name=model, enable_faults=True))
        mlp, svm, forest, slow = started
        inject_faults(slow.url, latency_ms=3000)
        proc = start_gateway(
            _config(mlp, svm, forest, slow), grpc=True, env={"GW_TEST_GLOBEX_KEY": GLOBEX}
        )
        try:
            yield proc
        finally:
            proc.cleanup()
    finally:
        for replica in started:
            replica.cleanup()


@pytest.fixture(scope="module")
def client(gateway: GatewayProcess) -> Iterator[triton.InferenceServerClient]:
    assert gateway.grpc_url is not None
    with triton.InferenceServerClient(gateway.grpc_url) as c:
        yield c


@pytest.fixture(scope="module")
def stub(gateway: GatewayProcess) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """tritonclient's own stub, for what its client hides: the answer's (trailing) metadata."""
    assert gateway.grpc_url is not None
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def raw_input(rows: np.ndarray) -> triton.InferInput:
    tensor = triton.InferInput("input", list(rows.shape), "FP32")
    return tensor.set_data_from_numpy(rows)


def typed_input(rows: np.ndarray) -> triton.InferInput:
    tensor = triton.InferInput("input", list(rows.shape), "FP32")
    tensor._get_tensor().contents.fp32_contents.extend(rows.ravel().tolist())
    return tensor


def infer_request(model: str, rows: np.ndarray) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="input", datatype="FP32", shape=list(rows.shape))
    request.raw_input_contents.append(rows.tobytes())
    return request


def rest_labels(gateway: GatewayProcess, model: str, rows: np.ndarray) -> list[int]:
    body = {
        "inputs": [
            {"name": "input", "shape": list(rows.shape), "datatype": "FP32", "data": rows.tolist()}
        ]
    }
    answer = httpx.post(
        f"{gateway.url}/v2/models/{model}/infer",
        content=orjson.dumps(body),
        trust_env=False,
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    label = next(o for o in answer.json()["outputs"] if o["name"] == "label")
    return [int(v) for v in label["data"]]


def refusal(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def test_health_metadata_and_the_triton_extensions(
    client: triton.InferenceServerClient,
) -> None:
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("digits") and client.is_model_ready("digits", "1")
    server = client.get_server_metadata()
    assert server.name == "v2-gateway" and "binary_tensor_data" in server.extensions
    meta = client.get_model_metadata("digits")
    assert meta.name == "digits" and [t.name for t in meta.inputs] == ["input"]
    assert {t.name for t in meta.outputs} == {"label", "probabilities"}
    assert list(meta.inputs[0].shape) == [-1, 64] and meta.inputs[0].datatype == "FP32"
    index = client.get_model_repository_index()
    assert {m.name for m in index.models} >= {"digits", "digits-vote", "digits-fallback"}
    config = client.get_model_config("digits").config
    assert config.name == "digits" and config.max_batch_size > 0
    assert [t.name for t in config.input] == ["input"] and list(config.input[0].dims) == [64]
    client.infer("digits", [raw_input(ROWS)])
    stats = client.get_inference_statistics("digits").model_stats
    assert stats[0].name == "digits" and stats[0].inference_stats.success.count >= 1


def test_the_log_stays_json_lines_while_grpc_serves(gateway: GatewayProcess) -> None:
    """gRPC's fork handlers would write a glog line at each fork (the parse process's at start)."""
    lines = [line for line in gateway.log_text().splitlines() if line.strip()]
    assert lines and all(line.startswith("{") for line in lines), lines


def test_typed_and_raw_contents_answer_as_rest_does(
    gateway: GatewayProcess, client: triton.InferenceServerClient
) -> None:
    expected = rest_labels(gateway, "digits", ROWS)
    for tensor in (typed_input(ROWS), raw_input(ROWS)):
        result = client.infer("digits", [tensor])
        assert result.as_numpy("label").tolist() == expected
        probabilities = result.as_numpy("probabilities")
        assert probabilities.shape == (3, 10) and probabilities.dtype == np.float32
        assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
    typed = typed_input(ROWS)._get_tensor()
    assert not typed.HasField("contents") or len(typed.contents.fp32_contents) == ROWS.size


def test_a_large_raw_message_answers_as_rest_does(
    gateway: GatewayProcess, client: triton.InferenceServerClient
) -> None:
    """256 KB of rows: read as views of the received message (`v2proto.grpc.wire`)."""
    rows = np.resize(ROWS, (1024, 64))
    assert rows.nbytes >= SPLIT_MIN_BYTES
    result = client.infer("digits", [raw_input(rows)])
    assert result.as_numpy("label").tolist() == rest_labels(gateway, "digits", rows)


def test_a_stream_answers_each_request_as_modelinfer_does(
    gateway: GatewayProcess, client: triton.InferenceServerClient
) -> None:
    """tritonclient's stream API (ModelStreamInfer): answers as they come, each with its id; a
    refused request is an error on the stream, which goes on."""
    expected = rest_labels(gateway, "digits", ROWS)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        asked = [f"s-{i}" for i in range(6)]
        for request_id in asked[:3]:
            client.async_stream_infer("digits", [raw_input(ROWS)], request_id=request_id)
        client.async_stream_infer("no-such-model", [raw_input(ROWS)], request_id="s-bad")
        for request_id in asked[3:]:
            client.async_stream_infer("digits", [typed_input(ROWS)], request_id=request_id)
        client.async_stream_infer("digits-vote", [raw_input(ROWS)], request_id="s-vote")
        got, errors = {}, []
        for _ in range(len(asked) + 2):
            result, error = answers.get(timeout=30)
            if error is not None:
                errors.append(error)
            else:
                got[result.get_response().id] = result
    finally:
        client.stop_stream()
    assert set(got) == {*asked, "s-vote"}
    assert all(r.as_numpy("label").tolist() == expected for r in got.values())
    (error,) = errors
    assert "no-such-model" in str(error), error


def test_answer_metadata_names_the_replica_and_the_request(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    metadata = (("x-request-id", "grpc-req-1"),)
    response, call = stub.ModelInfer.with_call(infer_request("digits", ROWS), metadata=metadata)
    got = dict(call.trailing_metadata())
    assert got["x-served-by"] == "mlp-0" and got["x-attempts"] == "1"
    assert got["x-request-id"] == "grpc-req-1" and response.id == "grpc-req-1"
    assert response.model_name == "digits" and len(response.raw_output_contents) == 2


def test_a_vote_says_so(
    client: triton.InferenceServerClient, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    result = client.infer("digits-vote", [raw_input(ROWS)])
    tally = result.get_response().parameters["vote"].string_param
    assert tally in ("3/3", "2/3", "2/2")
    assert result.as_numpy("label").shape == (3,)
    _, call = stub.ModelInfer.with_call(infer_request("digits-vote", ROWS))
    got = dict(call.trailing_metadata())
    assert got["x-vote"] in ("3/3", "2/3", "2/2")
    assert set(got["x-served-by"].split(",")) <= {"mlp-0", "svm-0", "forest-0"}


def test_a_fallback_answer_says_it_is_degraded(
    client: triton.InferenceServerClient, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    result = client.infer("digits-fallback", [raw_input(ROWS)], client_timeout=10)
    parameters = result.get_response().parameters
    assert parameters["degraded"].string_param
    assert parameters["served_by"].string_param == "fallback/digits-logreg"
    assert result.as_numpy("label").shape == (3,)
    _, call = stub.ModelInfer.with_call(infer_request("digits-fallback", ROWS), timeout=10)
    got = dict(call.trailing_metadata())
    assert got["x-degraded"] and got["x-served-by"] == "fallback/digits-logreg"


def test_bad_inputs_are_invalid_argument_naming_the_field(
    client: triton.InferenceServerClient,
) -> None:
    wrong_name = triton.InferInput("pixels", [1, 64], "FP32").set_data_from_numpy(ROWS[:1])
    short_raw = raw_input(ROWS[:1])
    short_raw._raw_content = short_raw._raw_content[:100]
    short_typed = typed_input(ROWS[:1])
    short_typed._get_tensor().contents.fp32_contents.pop()
    ints = triton.InferInput("input", [1, 64], "INT32").set_data_from_numpy(
        np.zeros((1, 64), np.int32)
    )
    for tensor, field in (
        (wrong_name, "pixels"),
        (short_raw, "input"),
        (short_typed, "fp32_contents"),
        (ints, "INT32"),
    ):
        error = refusal(lambda t=tensor: client.infer("digits", [t]))
        assert error.status() == "StatusCode.INVALID_ARGUMENT", error
        assert field in error.message(), error


def test_unknown_model_is_not_found(client: triton.InferenceServerClient) -> None:
    error = refusal(lambda: client.infer("no-such-model", [raw_input(ROWS)]))
    assert error.status() == "StatusCode.NOT_FOUND" and "no-such-model" in error.message()
    error = refusal(lambda: client.get_model_metadata("no-such-model"))
    assert error.status() == "StatusCode.NOT_FOUND"
    error = refusal(lambda: client.infer("digits", [raw_input(ROWS)], model_version="9"))
    assert error.status() == "StatusCode.NOT_FOUND"


def test_no_key_is_unauthenticated_and_a_tenant_over_its_rate_exhausted(
    client: triton.InferenceServerClient, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    error = refusal(lambda: client.infer("digits-keyed", [raw_input(ROWS)]))
    assert error.status() == "StatusCode.UNAUTHENTICATED" and "API key" in error.message()
    error = refusal(
        lambda: client.infer("digits", [raw_input(ROWS)], headers={"x-api-key": "nobody-Zz9Zz9"})
    )
    assert error.status() == "StatusCode.UNAUTHENTICATED"
    key = (("authorization", f"Bearer {GLOBEX}"),)
    for _ in range(2):  # globex's burst
        stub.ModelInfer(infer_request("digits-keyed", ROWS), metadata=key)
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(infer_request("digits-keyed", ROWS), metadata=key)
    limited: Any = caught.value
    assert limited.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "globex" in limited.details()
    trailing = dict(limited.trailing_metadata())
    assert 1 <= int(trailing["retry-after"]) <= 5 and trailing["x-http-status"] == "429"


def test_a_message_over_the_body_limit_is_exhausted_without_a_retry_after(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    big = np.zeros((9000, 64), np.float32)  # 2.3 MB: over server.max_body_bytes
    assert big.nbytes > BODY_LIMIT
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelInfer(infer_request("digits", big))
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "larger than max" in error.details()
    assert "retry-after" not in dict(error.trailing_metadata() or ())


def test_metadata_follows_the_header_limit(
    stub: service_pb2_grpc.GRPCInferenceServiceStub,
) -> None:
    """``server.max_header_bytes`` (32 KiB) bounds metadata as it bounds REST's headers."""
    live = service_pb2.ServerLiveRequest()
    assert stub.ServerLive(live, metadata=(("x-note", "n" * 20_000),)).live  # over gRPC's 8 KiB
    with pytest.raises(grpc.RpcError) as caught:
        stub.ServerLive(live, metadata=(("x-note", "n" * 40_000),))
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "metadata" in error.details()


def test_the_grpc_deadline_is_the_requests_deadline(
    gateway: GatewayProcess, client: triton.InferenceServerClient
) -> None:
    started = time.monotonic()
    error = refusal(lambda: client.infer("digits-slow", [raw_input(ROWS)], client_timeout=0.4))
    assert error.status() == "StatusCode.DEADLINE_EXCEEDED"
    assert time.monotonic() - started < 2.0  # not the replica's 3 s, nor the model's 5 s
    # the gateway ended it at the client's deadline (504), not the model's 5 s timeout
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        metrics = httpx.get(f"{gateway.url}/metrics", trust_env=False).text
        if any(
            line.startswith("gateway_requests_total{")
            and 'model="digits-slow"' in line
            and 'code="504"' in line
            for line in metrics.splitlines()
        ):
            return
        time.sleep(0.05)
    raise AssertionError("no 504 recorded for digits-slow")


async def test_sigterm_drains_the_grpc_door_too(models_dir: Path) -> None:
    """Through ``drain_s`` ServerReady says not ready and RPCs are served; then the port takes
    no new connection while the RPC in flight finishes, and the process exits 0."""
    replica = start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp", enable_faults=True)
    config = {
        "pools": {"mlp": {"model": "digits-mlp", "replicas": [{"id": "r0", "url": replica.url}]}},
        "models": {"digits": {"pool": "mlp", "max_timeout_ms": 10000}},
        "server": {"drain_s": 1.0},
    }
    gateway = start_gateway(config, grpc=True)
    try:
        assert gateway.grpc_url is not None and gateway.grpc_port is not None
        async with grpc.aio.insecure_channel(gateway.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            ready = service_pb2.ServerReadyRequest()
            assert (await stub.ServerReady(ready)).ready
            await asyncio.to_thread(inject_faults, replica.url, latency_ms=2500)
            signalled = time.monotonic()
            gateway.send_signal(signal.SIGTERM)
            while (await stub.ServerReady(ready)).ready:
                assert time.monotonic() - signalled < 0.5, "still ready 0.5 s after SIGTERM"
            in_flight = asyncio.ensure_future(
                stub.ModelInfer(infer_request("digits", ROWS), timeout=10)
            )
            await asyncio.to_thread(
                wait_until, lambda: not _accepts(gateway.grpc_port), 5.0, message="gRPC closed"
            )
            assert not in_flight.done()  # no new connections, one RPC in flight
            answer = await in_flight
            assert answer.model_name == "digits" and len(answer.raw_output_contents) == 2
        assert await asyncio.to_thread(gateway.wait, 20.0) == 0
    finally:
        gateway.cleanup()
        replica.cleanup()


def _accepts(port: int | None) -> bool:
    assert port is not None
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def test_a_grpc_client_reaches_a_grpc_pool_and_a_rest_pool_alike(models_dir: Path) -> None:
    """Both ways converted: gRPC in, a grpc:// pool or a REST pool behind, the same tensors."""
    replica = start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp", grpc=True)
    try:
        assert replica.grpc_url is not None
        config = {
            "pools": {
                "grpc": {
                    "model": "digits-mlp",
                    "replicas": [{"id": "g0", "url": replica.grpc_url}],
                },
                "rest": {"model": "digits-mlp", "replicas": [{"id": "h0", "url": replica.url}]},
            },
            "models": {"over-grpc": {"pool": "grpc"}, "over-rest": {"pool": "rest"}},
        }
        gateway = start_gateway(config, grpc=True)
        try:
            assert gateway.grpc_url is not None
            with triton.InferenceServerClient(gateway.grpc_url) as client:
                answers = [
                    client.infer(model, [make(ROWS)])
                    for model in ("over-grpc", "over-rest")
                    for make in (raw_input, typed_input)
                ]
            first = answers[0]
            for answer in answers[1:]:
                for name in ("label", "probabilities"):
                    assert np.array_equal(answer.as_numpy(name), first.as_numpy(name)), name
            assert first.as_numpy("label").tolist() == rest_labels(gateway, "over-rest", ROWS)
        finally:
            gateway.cleanup()
    finally:
        replica.cleanup()

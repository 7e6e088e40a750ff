"""Real ``replica serve`` processes on loopback, driven by httpx and tritonclient."""

from __future__ import annotations

import secrets
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from replicas.dataset import Split
from replicas.fault_auth import bearer
from replicas.faults import CRASH_EXIT_CODE
from replicas.model import OnnxModel
from tests.support.faults import clear_faults, inject_faults
from tests.support.processes import ReplicaProcess, free_port, start_replica, wait_until

pytestmark = pytest.mark.integration

INFER = "/v2/models/digits/infer"


def infer_body(x: np.ndarray) -> dict[str, object]:
    return {
        "inputs": [
            {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
        ]
    }


@pytest.fixture(scope="module")
def replica(model_path: Path) -> Iterator[ReplicaProcess]:
    proc = start_replica(model_path, enable_faults=True, extra_args=["--fault-seed", "1"])
    try:
        yield proc
    finally:
        proc.cleanup()


@pytest.fixture
def http(replica: ReplicaProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=replica.url, timeout=10) as client:
        yield client
        clear_faults(client)


@pytest.fixture
def triton(replica: ReplicaProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(f"{replica.host}:{replica.port}")
    try:
        yield client
    finally:
        client.close()


def test_metadata_and_json_infer(http: httpx.Client, onnx_model: OnnxModel, split: Split) -> None:
    assert http.get("/v2").json()["extensions"] == ["binary_tensor_data"]
    assert http.get("/v2/models/digits").json()["parameters"]["execution_provider"] == (
        "CPUExecutionProvider"
    )
    x = split.X_test[:8]
    r = http.post(INFER, json=infer_body(x))
    assert r.status_code == 200
    assert r.json()["outputs"][0]["data"] == onnx_model.run({"input": x})["label"].tolist()


@pytest.mark.parametrize("binary_in", [True, False])
@pytest.mark.parametrize("binary_out", [True, False])
def test_tritonclient(
    triton: httpclient.InferenceServerClient,
    onnx_model: OnnxModel,
    split: Split,
    binary_in: bool,
    binary_out: bool,
) -> None:
    assert triton.is_server_live() and triton.is_server_ready()
    assert triton.is_model_ready("digits") and triton.is_model_ready("digits", "1")
    assert triton.get_server_metadata()["name"] == "replica"
    assert triton.get_model_metadata("digits")["inputs"][0]["shape"] == [-1, 64]
    x = split.X_test[10:16]
    infer_input = httpclient.InferInput("input", list(x.shape), "FP32")
    infer_input.set_data_from_numpy(x, binary_data=binary_in)
    outputs = [
        httpclient.InferRequestedOutput("label", binary_data=binary_out),
        httpclient.InferRequestedOutput("probabilities", binary_data=binary_out),
    ]
    result = triton.infer("digits", [infer_input], outputs=outputs, request_id="t-1")
    expected = onnx_model.run({"input": x})
    np.testing.assert_array_equal(result.as_numpy("label"), expected["label"])
    np.testing.assert_allclose(
        result.as_numpy("probabilities"), expected["probabilities"], rtol=1e-6
    )
    assert result.get_response()["id"] == "t-1"


def test_tritonclient_default_outputs(
    triton: httpclient.InferenceServerClient, split: Split
) -> None:
    infer_input = httpclient.InferInput("input", [1, 64], "FP32")
    infer_input.set_data_from_numpy(split.X_test[:1])
    result = triton.infer("digits", [infer_input])  # binary_data_output: true
    assert result.as_numpy("label").shape == (1,)
    assert result.as_numpy("probabilities").shape == (1, 10)


def test_bad_request_reaches_tritonclient(triton: httpclient.InferenceServerClient) -> None:
    infer_input = httpclient.InferInput("input", [1, 63], "FP32")
    infer_input.set_data_from_numpy(np.zeros((1, 63), np.float32))
    with pytest.raises(InferenceServerException, match="dimension 1 must be 64") as info:
        triton.infer("digits", [infer_input])
    assert info.value.status() == "400"


def test_latency_fault(http: httpx.Client, split: Split) -> None:
    assert inject_faults(http, latency_ms=300).json()["latency_ms"] == 300
    started = time.monotonic()
    assert http.post(INFER, json=infer_body(split.X_test[:1])).status_code == 200
    assert time.monotonic() - started >= 0.3


def test_error_fault(http: httpx.Client, split: Split) -> None:
    inject_faults(http, error_rate=1.0)
    r = http.post(INFER, json=infer_body(split.X_test[:1]))
    assert (r.status_code, r.json()) == (500, {"error": "injected fault"})


def test_corrupt_fault(http: httpx.Client, onnx_model: OnnxModel, split: Split) -> None:
    x = split.X_test[:10]
    inject_faults(http, corrupt_rate=1.0)
    outputs = {o["name"]: o for o in http.post(INFER, json=infer_body(x)).json()["outputs"]}
    labels = np.array(outputs["label"]["data"])
    assert np.all(labels != onnx_model.run({"input": x})["label"])
    probabilities = np.array(outputs["probabilities"]["data"]).reshape(10, 10)
    np.testing.assert_array_equal(probabilities.argmax(axis=1), labels)


def test_ready_fault(http: httpx.Client, triton: httpclient.InferenceServerClient) -> None:
    inject_faults(http, ready=False)
    assert http.get("/v2/health/ready").status_code == 503
    assert not triton.is_server_ready() and not triton.is_model_ready("digits")
    clear_faults(http)
    assert triton.is_server_ready()


def test_hang_fault(http: httpx.Client, replica: ReplicaProcess, split: Split) -> None:
    inject_faults(http, hang=True)
    with (
        httpx.Client(base_url=replica.url, timeout=0.5) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        impatient.post(INFER, json=infer_body(split.X_test[:1]))
    clear_faults(http)
    assert http.post(INFER, json=infer_body(split.X_test[:1])).status_code == 200


def test_crash_fault(model_path: Path) -> None:
    proc = start_replica(model_path, enable_faults=True)
    try:
        assert inject_faults(proc.url, crash=True).status_code == 202
        wait_until(lambda: not proc.alive(), 5, message="the crashed replica to exit")
        assert proc.returncode == CRASH_EXIT_CODE
    finally:
        proc.cleanup()


def test_no_admin_without_the_flag_and_sigterm_drains(model_path: Path, split: Split) -> None:
    proc = start_replica(model_path)
    try:
        assert httpx.post(f"{proc.url}/admin/faults", json={"crash": True}).status_code == 404
        with httpx.Client(base_url=proc.url, timeout=10) as client:
            assert client.post(INFER, json=infer_body(split.X_test[:1])).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        log = proc.log_text()
        assert log.index("readiness is now false") < log.index("Finished server process")
    finally:
        proc.cleanup()


def test_faults_without_a_key_refuse_to_start(model_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "replicas.cli",
        "serve",
        "--model",
        str(model_path),
        "--name",
        "digits",
        "--port",
        str(free_port()),
        "--enable-faults",
    ]
    with ReplicaProcess(
        argv, host="127.0.0.1", port=0, name="nokey", version="1", fault_key=None
    ) as proc:
        assert proc.wait(timeout=30) == 2
        assert "--enable-faults needs a key: set REPLICA_FAULT_KEY or pass --fault-key-file" in (
            proc.log_text()
        )


def test_the_fault_key_from_a_file_guards_the_routes_and_is_never_echoed(
    model_path: Path, tmp_path: Path
) -> None:
    key, wrong = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    key_file = tmp_path / "fault-key"
    key_file.write_text(key + "\n")
    proc = start_replica(
        model_path,
        enable_faults=True,
        fault_key=wrong,  # the environment's key loses to the file's
        extra_args=["--fault-key-file", str(key_file), "--log-level", "debug"],
    )
    bodies: list[str] = []
    try:
        with httpx.Client(base_url=proc.url, timeout=10, trust_env=False) as client:
            for headers in ({}, bearer(wrong), {"Authorization": key}, bearer(key + "x")):
                r = client.post("/admin/faults", json={"latency_ms": 1}, headers=headers)
                assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
                bodies.append(r.text)
            r = client.post(
                "/admin/faults",
                content=b'{"hang": true}',
                headers={**bearer(key), "content-type": "text/plain"},
            )
            assert r.status_code == 415 and "application/json" in r.json()["error"]
            bodies.append(r.text)
            r = client.post("/admin/faults", json={"latency_ms": 1}, headers=bearer(key))
            assert (r.status_code, r.json()["latency_ms"]) == (200, 1)
            bodies.append(client.delete("/admin/faults", headers=bearer(key)).text)
            bodies.append(client.get("/admin/faults", headers=bearer(key)).text)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        log = proc.log_text()
        assert "faults now" in log  # the changes are logged, the key is not
        for secret in (key, wrong):
            assert secret not in log
            assert all(secret not in body for body in bodies)
    finally:
        proc.cleanup()


def one_in_flight(url: str) -> bool:
    """Whether the replica's ``replica_requests_in_flight{model=...,version=...}`` is 1."""
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    return any(
        line.startswith("replica_requests_in_flight{") and line.endswith("} 1.0") for line in lines
    )


def test_sigterm_lets_in_flight_requests_finish(model_path: Path, split: Split) -> None:
    proc = start_replica(model_path, enable_faults=True)
    try:
        with httpx.Client(base_url=proc.url, timeout=10) as client, ThreadPoolExecutor(1) as pool:
            inject_faults(client, latency_ms=800)
            pending = pool.submit(client.post, INFER, json=infer_body(split.X_test[:1]))
            wait_until(
                lambda: one_in_flight(proc.url),
                5,
                message="the request to be in flight",
            )
            proc.send_signal(signal.SIGTERM)
            assert pending.result(timeout=10).status_code == 200
        assert proc.wait(timeout=15) == 0
    finally:
        proc.cleanup()


def test_sigterm_answers_hung_requests_when_the_grace_period_ends(
    model_path: Path, split: Split
) -> None:
    proc = start_replica(model_path, enable_faults=True, extra_args=["--graceful-timeout", "1"])
    try:
        with httpx.Client(base_url=proc.url, timeout=10) as client, ThreadPoolExecutor(1) as pool:
            inject_faults(client, hang=True)
            pending = pool.submit(client.post, INFER, json=infer_body(split.X_test[:1]))
            wait_until(
                lambda: one_in_flight(proc.url),
                5,
                message="the request to be in flight",
            )
            proc.send_signal(signal.SIGTERM)
            r = pending.result(timeout=10)
            assert (r.status_code, r.json()) == (
                503,
                {"error": "replica shut down before answering"},
            )
        assert proc.wait(timeout=15) == 0
    finally:
        proc.cleanup()

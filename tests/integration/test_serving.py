"""The serving path end to end: real replicas, a real gateway, real V2 clients."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
import yaml
from tritonclient.utils import InferenceServerException

from gateway.cli import main
from replicas.dataset import load_split
from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults
from tests.support.gateway import pool_config, start_gateway
from tests.support.processes import ReplicaProcess, start_replica

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gateway_url(models_dir: Path) -> Iterator[str]:
    """One stack (two replicas, a gateway) for the tests that only read from it: what they
    check does not depend on what the others sent; a test that counts starts its own."""
    replicas: list[ReplicaProcess] = []
    try:
        for _ in range(2):
            replicas.append(
                start_replica(models_dir / "digits-mlp.onnx", name="digits-mlp", enable_faults=True)
            )
        gateway = start_gateway(pool_config(replicas))
        try:
            yield gateway.url
        finally:
            gateway.cleanup()
    finally:
        for replica in replicas:
            replica.cleanup()


@pytest.fixture
def fresh_gateway_url(start_replicas: StartReplicas, start_gw: StartGateway) -> str:
    """A stack of its own, for a test that counts what the gateway served."""
    replicas = start_replicas(2)
    return start_gw(pool_config(replicas)).url


def test_tritonclient_live_ready_metadata_and_infer(gateway_url: str) -> None:
    _, x_test, _, y_test = load_split()
    client = triton.InferenceServerClient(gateway_url.removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("digits") and not client.is_model_ready("nope")
    metadata = client.get_model_metadata("digits")
    assert metadata["name"] == "digits" and metadata["inputs"][0]["name"] == "input"
    batch = x_test[:32]
    for binary in (True, False):
        tensor = triton.InferInput("input", list(batch.shape), "FP32")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        outputs = [
            triton.InferRequestedOutput("label", binary_data=binary),
            triton.InferRequestedOutput("probabilities", binary_data=binary),
        ]
        result = client.infer("digits", [tensor], outputs=outputs, request_id="abc")
        labels = result.as_numpy("label")
        assert labels is not None and labels.shape == (32,)
        assert (labels == y_test[:32]).mean() >= 0.9
        probabilities = result.as_numpy("probabilities")
        assert probabilities is not None and probabilities.shape == (32, 10)
        assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-3)
        response = result.get_response()
        assert response["model_name"] == "digits" and response["id"] == "abc"
    implicit = client.infer("digits", [tensor])  # tritonclient asks for binary outputs
    assert implicit.as_numpy("label") is not None


def test_tritonclient_repository_index_config_and_statistics(fresh_gateway_url: str) -> None:
    client = triton.InferenceServerClient(fresh_gateway_url.removeprefix("http://"))
    assert client.get_model_repository_index() == [
        {"name": "digits", "version": "1", "state": "READY", "reason": ""}
    ]
    config = client.get_model_config("digits")
    assert config["name"] == "digits" and config["max_batch_size"] == 1024
    assert config["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [64]}]
    assert {o["name"] for o in config["output"]} == {"label", "probabilities"}
    _, x_test, _, _ = load_split()
    tensor = triton.InferInput("input", [4, 64], "FP32")
    tensor.set_data_from_numpy(x_test[:4])
    for _ in range(3):
        client.infer("digits", [tensor])
    with pytest.raises(InferenceServerException):
        client.infer("digits", [triton.InferInput("pixels", [1, 64], "FP32")])
    [stats] = client.get_inference_statistics("digits")["model_stats"]
    assert stats["name"] == "digits" and stats["version"] == "1"
    assert stats["inference_stats"]["success"]["count"] == 3
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert (stats["inference_count"], stats["execution_count"]) == (12, 3)  # rows, as Triton
    assert stats["inference_stats"]["success"]["ns"] > 0 and stats["last_inference"] > 0
    assert client.get_inference_statistics()["model_stats"][0]["name"] == "digits"
    with pytest.raises(InferenceServerException, match="not found"):
        client.get_model_config("nope")


def test_tritonclient_sees_errors_as_exceptions(gateway_url: str) -> None:
    client = triton.InferenceServerClient(gateway_url.removeprefix("http://"))
    wrong = triton.InferInput("pixels", [1, 64], "FP32")
    wrong.set_data_from_numpy(np.zeros((1, 64), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="pixels"):
        client.infer("digits", [wrong])
    with pytest.raises(InferenceServerException, match="not found"):
        client.infer("nope", [wrong])


def test_httpx_json_infer_and_headers(gateway_url: str) -> None:
    _, x_test, _, _ = load_split()
    request = {
        "inputs": [
            {"name": "input", "shape": [2, 64], "datatype": "FP32", "data": x_test[:2].tolist()}
        ]
    }
    with httpx.Client(base_url=gateway_url, trust_env=False) as client:
        response = client.post("/v2/models/digits/versions/1/infer", content=orjson.dumps(request))
        assert response.status_code == 200, response.text
        assert response.headers["x-served-by"] in {"r0", "r1"}
        assert response.headers["x-attempts"] == "1"
        assert "x-degraded" not in response.headers
        body = response.json()
        assert body["model_name"] == "digits" and body["model_version"] == "1"
        assert [o["name"] for o in body["outputs"]] == ["label", "probabilities"]
        state = client.get("/admin/state").json()
        urls = {r["url"] for p in state["pools"] for r in p["replicas"]}
        assert len(urls) == 2


@pytest.mark.parametrize(
    ("path", "content", "headers", "status", "needle"),
    [
        ("/v2/models/digits/infer", b"{nope", {}, 400, "JSON"),
        ("/v2/models/digits/infer", b'{"inputs": []}', {}, 400, "inputs"),
        (
            "/v2/models/digits/infer",
            b'{"inputs": [{"name": "input", "shape": [1, 63], "datatype": "FP32", "data": [1]}]}',
            {},
            400,
            "input",
        ),
        (
            "/v2/models/digits/infer",
            b'{"inputs": [{"name": "input", "shape": [1, 64], "datatype": "INT8", "data": [%s]}]}'
            % b", ".join([b"1"] * 64),
            {},
            400,
            "datatype INT8, the model takes FP32",
        ),
        (
            "/v2/models/digits/infer",
            b'{"inputs": [{"name": "input", "shape": [1, 1], "datatype": "FP32", "data": ["1"]}]}',
            {},
            400,
            "input 'input': 'data' element 0 is a string",
        ),
        ("/v2/models/nope/infer", b"{}", {}, 404, "nope"),
        ("/v2/models/digits/versions/7/infer", b"{}", {}, 404, "version"),
        (
            "/v2/models/digits/infer",
            b"{}",
            {"x-request-timeout-ms": "-1"},
            400,
            "x-request-timeout-ms",
        ),
    ],
)
def test_bad_input_gets_a_precise_json_4xx(
    gateway_url: str,
    path: str,
    content: bytes,
    headers: dict[str, str],
    status: int,
    needle: str,
) -> None:
    response = httpx.post(gateway_url + path, content=content, headers=headers, trust_env=False)
    assert response.status_code == status, response.text
    assert needle in response.json()["error"]


def test_deadline_exceeded_is_504(start_replicas: StartReplicas, start_gw: StartGateway) -> None:
    replicas = start_replicas(1)
    gateway = start_gw(pool_config(replicas))
    inject_faults(replicas[0].url, latency_ms=400)
    _, x_test, _, _ = load_split()
    request = {
        "inputs": [
            {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": x_test[0].tolist()}
        ]
    }
    response = httpx.post(
        f"{gateway.url}/v2/models/digits/infer",
        json=request,
        headers={"x-request-timeout-ms": "100"},
        trust_env=False,
        timeout=5,
    )
    assert response.status_code == 504, response.text
    assert "deadline of 100 ms exceeded" in response.json()["error"]


def test_no_replica_reachable_is_503(start_replicas: StartReplicas, start_gw: StartGateway) -> None:
    replicas = start_replicas(1)
    gateway = start_gw(pool_config(replicas))
    replicas[0].stop()
    _, x_test, _, _ = load_split()
    request = {
        "inputs": [
            {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": x_test[0].tolist()}
        ]
    }
    response = httpx.post(f"{gateway.url}/v2/models/digits/infer", json=request, trust_env=False)
    assert response.status_code == 503
    assert "error" in response.json() and "retry-after" in response.headers
    port = replicas[0].url.rsplit(":", 1)[1]
    assert port not in response.text, response.text  # the replica's id, never its address


def test_check_config_probe_passes_the_projects_own_replicas(
    start_replicas: StartReplicas, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Our replicas speak the gateway's default dialect: names, versions, binary tensors."""
    replicas = start_replicas(1)
    golden = {"file": str(ROOT / "fallback_models" / "digits-golden.json")}
    config = pool_config(replicas, pool={"golden": golden})
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    code, out = main(["check-config", str(path), "--probe"]), capsys.readouterr().out
    assert code == 0, out
    assert "echoes request ids" in out  # echoes_id stays true for them
    wrong = pool_config(
        replicas, pool={"golden": golden, "tensors": {"outputs": {"label": "predict"}}}
    )
    path.write_text(yaml.safe_dump(wrong))
    assert main(["check-config", str(path), "--probe"]) == 1
    assert "no output 'predict' (mapped from 'label') on the server" in capsys.readouterr().out


def test_every_answer_carries_the_request_id_and_the_trace(gateway_url: str) -> None:
    _, x_test, _, _ = load_split()
    good = {
        "inputs": [
            {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": x_test[0].tolist()}
        ]
    }
    bad = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32", "data": [0] * 64}]}
    with httpx.Client(base_url=gateway_url, trust_env=False, timeout=10) as client:
        answers = [
            client.post("/v2/models/digits/infer", json=good, headers={"x-request-id": "r-1"}),
            client.post("/v2/models/digits/infer", json=bad, headers={"x-request-id": "r-2"}),
            client.get("/v2/health/ready", headers={"x-request-id": "r-3"}),
            client.get("/v2/models/digits", headers={"x-request-id": "r-4"}),
            client.get("/v2/models/nope", headers={"x-request-id": "r-5"}),
        ]
        fresh = client.get("/v2/health/live")
    assert [a.status_code for a in answers] == [200, 400, 200, 200, 404]
    for i, answer in enumerate(answers, 1):
        assert answer.headers["x-request-id"] == f"r-{i}"
        assert answer.headers["traceparent"].startswith("00-")
    assert fresh.headers["x-request-id"] and fresh.headers["traceparent"]


def test_one_json_log_stream_for_gateway_uvicorn_and_replicas(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(1)
    gateway = start_gw(pool_config(replicas))
    httpx.get(f"{gateway.url}/v2/models/nope", trust_env=False)  # something to log about
    replicas[0].stop()  # its shutdown lines too
    for proc in (*replicas, gateway):
        lines = [line for line in proc.log_text().splitlines() if line.strip()]
        assert lines, f"{proc.name} wrote nothing"
        for line in lines:
            doc = orjson.loads(line)  # every line is one JSON object
            assert {"ts", "level", "logger", "msg"} <= set(doc), line
            assert "\x1b[" not in line, line  # no terminal colour codes (uvicorn's color_message)
        loggers = {orjson.loads(line)["logger"] for line in lines}
        assert any(name.startswith("uvicorn") for name in loggers), (proc.name, loggers)

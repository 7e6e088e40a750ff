"""The real peers answered directly (no gateway): what each says over V2 REST, pinned down.

These are the facts the gateway has to live with behind it, measured on MLServer 1.7.1 (sklearn
runtime) and KServe 0.21.0 (a custom ``kserve.Model``); a change here means a peer upgrade
changed its wire behaviour, which the gateway tests in this package then meet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import orjson
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.peers.conftest import Rows
from tests.support.peers import PeerProcess

pytestmark = [pytest.mark.integration, pytest.mark.peers]


@dataclass(frozen=True)
class Expected:
    """What one peer answers, where the two differ."""

    server: dict[str, Any]
    predict_shape: tuple[int, ...]  # for one row; the batch dimension comes first
    model_version: str | None  # in infer replies
    metadata_versions: list[str] | None
    metadata_has_tensors: bool  # inputs/outputs in the model metadata
    versioned_path_status: int  # POST .../versions/1/infer and GET .../versions/1[/ready]
    # the binary tensor extension by content-type: None is tritonclient's (no content-type),
    # application/json is what the gateway forwards upstream with Inference-Header-Content-Length
    binary_input_status: dict[str | None, int]
    binary_output: bool  # answers binary outputs when asked
    json_without_content_type: int  # a JSON body with no content-type (tritonclient's JSON)


EXPECTED = {
    "mlserver": Expected(
        server={"name": "mlserver", "version": "1.7.1", "extensions": []},
        predict_shape=(1,),
        model_version="1",
        metadata_versions=[],
        metadata_has_tensors=False,
        versioned_path_status=200,
        # application/octet-stream: a 500 from FastAPI's error encoder, or a reset connection
        binary_input_status={None: 422, "application/json": 422},
        binary_output=False,
        json_without_content_type=200,
    ),
    "kserve": Expected(
        server={
            "name": "kserve",
            "version": "0.21.0",
            "extensions": ["model_repository_extension"],
        },
        predict_shape=(),
        model_version=None,
        metadata_versions=None,
        metadata_has_tensors=True,
        versioned_path_status=501,
        binary_input_status={None: 200, "application/octet-stream": 200, "application/json": 400},
        binary_output=True,
        json_without_content_type=400,
    ),
}


def _expected(peer: PeerProcess) -> Expected:
    return EXPECTED[peer.peer.name]


def _json_body(x: np.ndarray[Any, Any], **extra: Any) -> dict[str, Any]:
    tensor = {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
    return {"inputs": [tensor], **extra}


def test_server_and_model_metadata(peer: PeerProcess) -> None:
    expected = _expected(peer)
    with httpx.Client(base_url=peer.url, timeout=10) as client:
        assert client.get("/v2").json() == expected.server
        assert client.get("/v2/health/live").status_code == 200
        metadata = client.get("/v2/models/digits").json()
        assert client.get("/v2/models/nope").status_code == 404
        assert client.get("/v2/models/nope/ready").status_code == 404
    assert metadata["name"] == "digits" and metadata["platform"] == ""
    assert metadata["versions"] == expected.metadata_versions
    outputs = {o["name"]: (o["datatype"], o["shape"]) for o in metadata["outputs"]}
    if expected.metadata_has_tensors:
        assert metadata["inputs"] == [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}]
        assert outputs == {"predict": ("INT64", [-1]), "predict_proba": ("FP32", [-1, 10])}
    else:  # MLServer's sklearn runtime describes no tensors unless model-settings does
        assert metadata["inputs"] == [] and outputs == {}


def test_json_infer_answers_labels(peer: PeerProcess, digits_rows: Rows) -> None:
    expected = _expected(peer)
    n = len(digits_rows.x)
    with httpx.Client(base_url=peer.url, timeout=10) as client:
        reply = client.post("/v2/models/digits/infer", json=_json_body(digits_rows.x, id="r-1"))
        flat = client.post(
            "/v2/models/digits/infer",
            json={
                "inputs": [
                    {
                        **_json_body(digits_rows.x)["inputs"][0],
                        "data": digits_rows.x.ravel().tolist(),
                    }
                ]
            },
        )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["model_name"] == "digits" and body["id"] == "r-1"
    assert body["model_version"] == expected.model_version
    [output] = body["outputs"]
    assert output["name"] == "predict" and output["datatype"] == "INT64"
    assert tuple(output["shape"]) == (n, *expected.predict_shape)
    labels = np.asarray(output["data"], dtype=np.int64)
    assert (labels == digits_rows.y).mean() >= 0.9
    assert flat.status_code == 200 and flat.json()["outputs"][0]["data"] == output["data"]


def test_predict_proba_on_request(peer: PeerProcess, digits_rows: Rows) -> None:
    outputs = [{"name": "predict_proba"}, {"name": "predict"}]
    with httpx.Client(base_url=peer.url, timeout=10) as client:
        reply = client.post(
            "/v2/models/digits/infer", json=_json_body(digits_rows.x, outputs=outputs)
        )
        unknown = client.post(
            "/v2/models/digits/infer", json=_json_body(digits_rows.x, outputs=[{"name": "label"}])
        )
    assert reply.status_code == 200, reply.text
    proba, predict = reply.json()["outputs"]
    assert proba["name"] == "predict_proba" and proba["datatype"] == "FP32"
    assert proba["shape"] == [len(digits_rows.x), 10]
    probabilities = np.asarray(proba["data"], dtype=np.float32).reshape(proba["shape"])
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
    assert probabilities.argmax(axis=1).tolist() == np.ravel(predict["data"]).tolist()
    assert unknown.status_code == 400 and "label" in unknown.text


def test_versioned_paths(peer: PeerProcess, digits_rows: Rows) -> None:
    status = _expected(peer).versioned_path_status
    with httpx.Client(base_url=peer.url, timeout=10) as client:
        infer = client.post("/v2/models/digits/versions/1/infer", json=_json_body(digits_rows.x))
        metadata = client.get("/v2/models/digits/versions/1")
        ready = client.get("/v2/models/digits/versions/1/ready")
    assert (infer.status_code, metadata.status_code, ready.status_code) == (status,) * 3
    if status == 501:
        assert "versioning not supported" in infer.text


def test_binary_tensors(peer: PeerProcess, digits_rows: Rows) -> None:
    """The binary tensor extension (Inference-Header-Content-Length), in and out."""
    expected = _expected(peer)
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "input",
                    "shape": list(digits_rows.x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": digits_rows.x.nbytes},
                }
            ]
        }
    )
    with httpx.Client(base_url=peer.url, timeout=10) as client:
        binary_in = {}
        for content_type in expected.binary_input_status:
            headers = {"inference-header-content-length": str(len(header))}
            if content_type is not None:
                headers["content-type"] = content_type
            reply = client.post(
                "/v2/models/digits/infer", content=header + digits_rows.x.tobytes(), headers=headers
            )
            binary_in[content_type] = reply.status_code
        binary_out = client.post(
            "/v2/models/digits/infer",
            json=_json_body(
                digits_rows.x, outputs=[{"name": "predict", "parameters": {"binary_data": True}}]
            ),
        )
    assert binary_in == expected.binary_input_status
    assert binary_out.status_code == 200
    length = binary_out.headers.get("inference-header-content-length")
    assert (length is not None) == expected.binary_output
    if length is not None:
        labels = np.frombuffer(binary_out.content[int(length) :], dtype=np.int64)
        assert (labels == digits_rows.y).mean() >= 0.9


def test_tritonclient(peer: PeerProcess, digits_rows: Rows) -> None:
    """tritonclient's JSON (no content-type) and binary requests, as a V2 client sends them."""
    expected = _expected(peer)
    client = triton.InferenceServerClient(peer.url.removeprefix("http://"))
    assert client.is_server_ready() and client.is_model_ready("digits")
    for binary, status in (
        (False, expected.json_without_content_type),
        (True, expected.binary_input_status[None]),
    ):
        tensor = triton.InferInput("input", list(digits_rows.x.shape), "FP32")
        tensor.set_data_from_numpy(digits_rows.x, binary_data=binary)
        if status != 200:
            with pytest.raises(InferenceServerException) as raised:
                client.infer("digits", [tensor])
            assert raised.value.status() == str(status)
            continue
        result = client.infer("digits", [tensor])
        labels = result.as_numpy("predict")
        assert labels is not None and labels.shape == (len(digits_rows.x), *expected.predict_shape)
        assert (labels.ravel() == digits_rows.y).mean() >= 0.9


def test_peers_agree(mlserver: PeerProcess, kserve: PeerProcess, digits_rows: Rows) -> None:
    """Both serve the same estimator, so their labels must match row for row."""
    labels = []
    for proc in (mlserver, kserve):
        reply = httpx.post(
            f"{proc.url}/v2/models/digits/infer", json=_json_body(digits_rows.x), timeout=10
        )
        labels.append(np.ravel(reply.json()["outputs"][0]["data"]).tolist())
    assert labels[0] == labels[1]

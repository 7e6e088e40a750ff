"""The real peers behind a real gateway: the plain route gives clients what the peer gives.

One gateway pool per peer (KServe's without a version: it answers 501 on versioned paths), the
client-facing models ``mlserver`` and ``kserve`` on them, and votes over two pools of one peer
and over both peers. What fails for a known issue-12 reason is a strict xfail, so the day the
gateway learns it the test says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.peers.conftest import Rows
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import PeerProcess
from tests.support.processes import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.peers]

PEERS = ("mlserver", "kserve")
GOLDEN_FILE = "fallback_models/digits-golden.json"
BINARY_XFAIL = {
    "mlserver": "MLServer 1.7.1 has no binary tensor extension over REST (422 JSON decode error)",
    "kserve": "the gateway forwards a binary body as content-type application/json, which "
    "KServe's FastAPI parses as JSON (400); KServe takes it with no or an octet-stream type",
}


def _pool(proc: PeerProcess, replica_id: str, **extra: Any) -> dict[str, Any]:
    """A one-replica pool of ``digits``; version 1 only where the peer serves versioned paths."""
    version = {"version": "1"} if proc.peer.name == "mlserver" else {}
    return {
        "model": "digits",
        **version,
        "replicas": [{"id": replica_id, "url": proc.url}],
        **extra,
    }


def _vote(*pools: str) -> dict[str, Any]:
    return {"vote": {"pools": list(pools), "quorum": len(pools), "label_outputs": ["predict"]}}


@pytest.fixture(scope="module")
def gateway(mlserver: PeerProcess, kserve: PeerProcess) -> Iterator[GatewayProcess]:
    config = {
        "pools": {
            "mlserver": _pool(mlserver, "mlserver-a"),
            "mlserver-again": _pool(mlserver, "mlserver-b"),
            "kserve": _pool(kserve, "kserve-a"),
            "kserve-again": _pool(kserve, "kserve-b"),
        },
        "models": {
            "mlserver": {"pool": "mlserver"},
            "kserve": {"pool": "kserve"},
            "vote-mlserver": _vote("mlserver", "mlserver-again"),
            "vote-kserve": _vote("kserve", "kserve-again"),
            "vote-mixed": _vote("mlserver", "kserve"),
        },
    }
    proc = start_gateway(config)
    yield proc
    proc.cleanup()


def _peer(request: pytest.FixtureRequest, name: str) -> PeerProcess:
    proc: PeerProcess = request.getfixturevalue(name)
    return proc


def _body(x: np.ndarray[Any, Any]) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
        ]
    }


def _infer(url: str, model: str, rows: Rows, path: str = "") -> httpx.Response:
    return httpx.post(f"{url}/v2/models/{model}{path}/infer", json=_body(rows.x), timeout=10)


@pytest.mark.parametrize("name", PEERS)
def test_json_through_gateway_matches_direct(
    request: pytest.FixtureRequest, gateway: GatewayProcess, digits_rows: Rows, name: str
) -> None:
    direct = _infer(_peer(request, name).url, "digits", digits_rows)
    routed = _infer(gateway.url, name, digits_rows)
    assert routed.status_code == 200, routed.text
    assert routed.json()["outputs"] == direct.json()["outputs"]
    assert routed.json()["model_name"] == name and routed.json()["model_version"] == "1"
    # Clients may name the version; the gateway calls KServe on its unversioned path.
    versioned = _infer(gateway.url, name, digits_rows, "/versions/1")
    assert versioned.status_code == 200 and versioned.json()["outputs"] == direct.json()["outputs"]


@pytest.mark.parametrize("name", PEERS)
def test_metadata_through_gateway(
    request: pytest.FixtureRequest, gateway: GatewayProcess, name: str
) -> None:
    direct = httpx.get(f"{_peer(request, name).url}/v2/models/digits", timeout=10).json()
    routed = httpx.get(f"{gateway.url}/v2/models/{name}", timeout=10).json()
    assert routed["name"] == name and routed["versions"] == ["1"]
    assert (routed["inputs"], routed["outputs"]) == (direct["inputs"], direct["outputs"])


@pytest.mark.parametrize("name", PEERS)
def test_tritonclient_json_through_gateway(
    request: pytest.FixtureRequest, gateway: GatewayProcess, digits_rows: Rows, name: str
) -> None:
    """tritonclient JSON has no content-type: KServe refuses that directly, not via the gateway."""
    direct = _infer(_peer(request, name).url, "digits", digits_rows).json()["outputs"][0]
    client = triton.InferenceServerClient(gateway.url.removeprefix("http://"))
    assert client.is_server_ready() and client.is_model_ready(name)
    tensor = triton.InferInput("input", list(digits_rows.x.shape), "FP32")
    tensor.set_data_from_numpy(digits_rows.x, binary_data=False)
    plain = triton.InferRequestedOutput("predict", binary_data=False)
    for outputs in ([plain], None):  # None: tritonclient asks for binary outputs
        result = client.infer(name, [tensor], outputs=outputs)
        labels = result.as_numpy("predict")
        assert labels is not None and list(labels.shape) == direct["shape"]
        assert labels.ravel().tolist() == np.ravel(direct["data"]).tolist()
        assert (labels.ravel() == digits_rows.y).mean() >= 0.9


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n,
            marks=pytest.mark.xfail(
                strict=True, reason=BINARY_XFAIL[n], raises=InferenceServerException
            ),
        )
        for n in PEERS
    ],
)
def test_binary_tensors_through_gateway(
    gateway: GatewayProcess, digits_rows: Rows, name: str
) -> None:
    client = triton.InferenceServerClient(gateway.url.removeprefix("http://"))
    tensor = triton.InferInput("input", list(digits_rows.x.shape), "FP32")
    tensor.set_data_from_numpy(digits_rows.x, binary_data=True)
    result = client.infer(name, [tensor])
    labels = result.as_numpy("predict")
    assert labels is not None and (labels.ravel() == digits_rows.y).mean() >= 0.9


@pytest.mark.parametrize("name", PEERS)
def test_vote_over_two_pools_of_one_peer(
    gateway: GatewayProcess, digits_rows: Rows, name: str
) -> None:
    reply = _infer(gateway.url, f"vote-{name}", digits_rows)
    assert reply.status_code == 200, reply.text
    assert reply.headers.get("x-vote") is not None
    labels = np.ravel(reply.json()["outputs"][0]["data"])
    assert (labels == digits_rows.y).mean() >= 0.9


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="same labels, different shapes: MLServer answers predict as [n, 1], KServe as [n]; "
    "the vote compares the tensors as sent and finds every row in dispute (503 no quorum)",
)
def test_vote_across_peers(gateway: GatewayProcess, digits_rows: Rows) -> None:
    reply = _infer(gateway.url, "vote-mixed", digits_rows)
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("name", PEERS)
@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="golden probes ask for no outputs and read a fixed 'label' output; the peers answer "
    "'predict', so every probe fails and the replica is quarantined",
)
def test_golden_probes_pass_a_healthy_peer(request: pytest.FixtureRequest, name: str) -> None:
    proc = _peer(request, name)
    golden = {"file": GOLDEN_FILE, "interval_s": 0.1, "failures_to_quarantine": 1}
    config = {
        "pools": {"primary": _pool(proc, "peer", golden=golden)},
        "models": {"digits": {"pool": "primary"}},
    }
    gateway = start_gateway(config)
    try:

        def replica() -> dict[str, Any]:
            state = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
            found: dict[str, Any] = state["pools"][0]["replicas"][0]
            return found

        wait_until(lambda: replica()["golden_last"] is not None, 10, interval=0.05)
        assert not replica()["quarantined"], replica()["quarantine_reason"]
    finally:
        gateway.cleanup()


def test_errors_from_peers_reach_the_client(gateway: GatewayProcess, digits_rows: Rows) -> None:
    """A peer's 400 for an output it does not have is the client's error, not a failover."""
    body = {**_body(digits_rows.x), "outputs": [{"name": "label"}]}
    for name in PEERS:
        reply = httpx.post(f"{gateway.url}/v2/models/{name}/infer", json=body, timeout=10)
        assert reply.status_code == 400 and "label" in reply.text
    with pytest.raises(InferenceServerException):
        triton.InferenceServerClient(gateway.url.removeprefix("http://")).infer("nope", [])

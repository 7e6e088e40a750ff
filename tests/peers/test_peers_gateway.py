"""The real peers behind a real gateway: the plain route gives clients what the peer gives.

One gateway pool per peer (KServe's without a version: it answers 501 on versioned paths), the
client-facing models ``mlserver`` and ``kserve`` on them, and votes over two pools of one peer
and over both peers. What fails for a known issue-12 reason is a strict xfail, so the day the
gateway learns it the test says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.peers.conftest import Rows
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import PeerProcess
from tests.support.processes import free_port, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.peers]

PEERS = ("mlserver", "kserve")
GOLDEN_FILE = str(Path(__file__).resolve().parents[2] / "fallback_models" / "digits-golden.json")
# MLServer's metadata lists no tensors: the model's config declares them for the gateway's checks
SIGNATURE = {
    "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
}
# client-facing names -> each peer's (ours: input / label [n] / probabilities)
MAPPED = {
    "mlserver": {"outputs": {"label": {"name": "predict", "shape": [-1]}}},
    "kserve": {"inputs": {"input": "input-0"}, "outputs": {"label": "predict"}},
}


def _pool(proc: PeerProcess, replica_id: str, **extra: Any) -> dict[str, Any]:
    """A one-replica pool of ``digits``; version 1 only where the peer serves versioned paths;
    MLServer 1.7.1 takes no binary tensors over REST (422), so the gateway sends it JSON."""
    mlserver = proc.peer.name == "mlserver"
    version = {"version": "1"} if mlserver else {}
    return {
        "model": "digits",
        **version,
        "replicas": [{"id": replica_id, "url": proc.url}],
        "binary_tensors": not mlserver,
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
            "mlserver-mapped": _pool(mlserver, "mlserver-m", tensors=MAPPED["mlserver"]),
            "kserve-mapped": _pool(kserve, "kserve-m", tensors=MAPPED["kserve"]),
            "kserve-down": {  # KServe's names; nothing listens: the fallback answers
                "model": "digits",
                "replicas": [{"id": "kserve-gone", "url": f"http://127.0.0.1:{free_port()}"}],
            },
        },
        "models": {
            "mlserver": {"pool": "mlserver"},
            "kserve": {"pool": "kserve"},
            "vote-mlserver": _vote("mlserver", "mlserver-again"),
            "vote-kserve": _vote("kserve", "kserve-again"),
            "vote-mixed": _vote("mlserver", "kserve"),
            "mapped-mlserver": {"pool": "mlserver-mapped"},
            "mlserver-declared": {"pool": "mlserver-mapped", "signature": SIGNATURE},
            "mapped-kserve": {"pool": "kserve-mapped"},
            "vote-mapped": {"vote": {"pools": ["mlserver-mapped", "kserve-mapped"], "quorum": 2}},
            "kserve-named": {
                "pool": "kserve-down",
                "fallback": {
                    "model": "digits-logreg",
                    "tensors": {"inputs": {"input-0": "input"}, "outputs": {"predict": "label"}},
                },
            },
        },
    }
    proc = start_gateway(config)
    yield proc
    proc.cleanup()


def _peer(request: pytest.FixtureRequest, name: str) -> PeerProcess:
    proc: PeerProcess = request.getfixturevalue(name)
    return proc


def _input(model: str) -> str:
    """The input's name as the model's metadata gives it: KServe's model lists ``input-0``
    (the gateway checks requests against it); MLServer lists none (any name passes)."""
    return "input-0" if model in ("kserve", "vote-kserve") else "input"


def _body(x: np.ndarray[Any, Any], name: str = "input") -> dict[str, Any]:
    return {
        "inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}]
    }


def _infer(url: str, model: str, rows: Rows, path: str = "") -> httpx.Response:
    body = _body(rows.x, _input(model))
    return httpx.post(f"{url}/v2/models/{model}{path}/infer", json=body, timeout=10)


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
    tensor = triton.InferInput(_input(name), list(digits_rows.x.shape), "FP32")
    tensor.set_data_from_numpy(digits_rows.x, binary_data=False)
    plain = triton.InferRequestedOutput("predict", binary_data=False)
    for outputs in ([plain], None):  # None: tritonclient asks for binary outputs
        result = client.infer(name, [tensor], outputs=outputs)
        labels = result.as_numpy("predict")
        assert labels is not None and list(labels.shape) == direct["shape"]
        assert labels.ravel().tolist() == np.ravel(direct["data"]).tolist()
        assert (labels.ravel() == digits_rows.y).mean() >= 0.9


@pytest.mark.parametrize("name", PEERS)
def test_binary_tensors_through_gateway(
    gateway: GatewayProcess, digits_rows: Rows, name: str
) -> None:
    """Binary to KServe goes as application/octet-stream (as JSON it was a 400); to MLServer,
    which has no binary extension over REST, as JSON (``binary_tensors: false``)."""
    client = triton.InferenceServerClient(gateway.url.removeprefix("http://"))
    tensor = triton.InferInput(_input(name), list(digits_rows.x.shape), "FP32")
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


def test_vote_across_peers(gateway: GatewayProcess, digits_rows: Rows) -> None:
    """MLServer's predict [n, 1] and KServe's [n] are the same labels: a unanimous vote."""
    reply = _infer(gateway.url, "vote-mixed", digits_rows)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-vote"] == "2/2" and reply.json()["parameters"] == {"vote": "2/2"}


@pytest.mark.parametrize("model", ["mapped-mlserver", "mapped-kserve", "vote-mapped"])
def test_one_vocabulary_over_every_peer(
    gateway: GatewayProcess, digits_rows: Rows, model: str
) -> None:
    """Clients call input / label of shape [n] whichever server answers, in JSON or binary."""
    client = triton.InferenceServerClient(gateway.url.removeprefix("http://"))
    metadata = client.get_model_metadata(model)
    if model == "mapped-kserve":  # KServe's metadata lists its tensors: in the client's names
        assert [t["name"] for t in metadata["inputs"]] == ["input"]
        assert metadata["outputs"][0]["name"] == "label"
    for binary in (False, True):
        tensor = triton.InferInput("input", list(digits_rows.x.shape), "FP32")
        tensor.set_data_from_numpy(digits_rows.x, binary_data=binary)
        wanted = [triton.InferRequestedOutput("label", binary_data=binary)]
        labels = client.infer(model, [tensor], outputs=wanted).as_numpy("label")
        assert labels is not None and labels.shape == (len(digits_rows.y),)
        assert (labels == digits_rows.y).mean() >= 0.9


def test_the_fallback_answers_in_a_peers_vocabulary(
    gateway: GatewayProcess, digits_rows: Rows
) -> None:
    """A model whose clients speak KServe's names (input-0, predict) keeps answering, degraded,
    from the fallback (input, label) while its pool is down."""
    body = {
        "inputs": [
            {
                "name": "input-0",
                "shape": list(digits_rows.x.shape),
                "datatype": "FP32",
                "data": digits_rows.x.ravel().tolist(),
            }
        ]
    }
    reply = httpx.post(f"{gateway.url}/v2/models/kserve-named/infer", json=body, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-degraded"] in ("exhausted", "no_replica")  # refused, or ejected
    outputs = {o["name"]: o for o in reply.json()["outputs"]}
    assert set(outputs) == {"predict", "probabilities"}  # the fallback's label, renamed
    assert (np.asarray(outputs["predict"]["data"]) == digits_rows.y).mean() >= 0.9


@pytest.mark.parametrize("name", PEERS)
def test_golden_probes_pass_a_healthy_peer(request: pytest.FixtureRequest, name: str) -> None:
    proc = _peer(request, name)
    golden = {"file": GOLDEN_FILE, "interval_s": 0.1, "failures_to_quarantine": 1}
    config = {
        "pools": {"primary": _pool(proc, "peer", golden=golden, tensors=MAPPED[name])},
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
        assert "rows wrong" in replica()["golden_last"]  # judged on its labels, and passed
    finally:
        gateway.cleanup()


def test_errors_from_peers_reach_the_client(gateway: GatewayProcess, digits_rows: Rows) -> None:
    """A 400 for an output the model does not have is the client's error, not a failover:
    MLServer's own (its metadata lists no outputs), told in fixed words as every replica's
    error text is, and the gateway's for KServe (it does), naming the output."""
    for name in PEERS:
        body = {**_body(digits_rows.x, _input(name)), "outputs": [{"name": "label"}]}
        reply = httpx.post(f"{gateway.url}/v2/models/{name}/infer", json=body, timeout=10)
        error = reply.json()["error"]
        assert reply.status_code == 400, error
        if name == "kserve":
            assert "unknown output 'label'" in error, error
        else:
            assert re.search(r"refused by .*: replica \S+ answered \d{3}: [a-z ]+$", error), error
    with pytest.raises(InferenceServerException):
        triton.InferenceServerClient(gateway.url.removeprefix("http://")).infer("nope", [])


def test_a_bad_input_never_reaches_mlserver_nor_ejects_it(
    gateway: GatewayProcess, digits_rows: Rows
) -> None:
    """MLServer answers a wrong feature count with a 500, which would charge a healthy replica
    for the client's mistake; checked against the declared signature, it never gets there."""
    metadata = httpx.get(f"{gateway.url}/v2/models/mlserver-declared", timeout=10).json()
    assert metadata["inputs"] == SIGNATURE["inputs"]  # the declared tensors, as it lists none
    bad = _body(digits_rows.x[:, :63])
    for _ in range(20):
        reply = httpx.post(f"{gateway.url}/v2/models/mlserver-declared/infer", json=bad, timeout=10)
        assert reply.status_code == 400
        assert reply.json()["error"] == "input 'input': shape [40, 63], the model takes [-1, 64]"
        assert "x-served-by" not in reply.headers
    for _ in range(5):
        good = _infer(gateway.url, "mlserver-declared", digits_rows)
        assert good.status_code == 200 and good.headers["x-served-by"] == "mlserver-m"
    state = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    [replica] = [r for p in state["pools"] for r in p["replicas"] if r["id"] == "mlserver-m"]
    assert replica["failures"] == 0 and not replica["ejected"]

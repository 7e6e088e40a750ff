"""A vote over our replica, the real MLServer and the real KServe asks each for what it compares.

Left to their defaults the three answer different outputs for one request (ours ``label`` and
``probabilities``, the scikit-learn servers ``predict`` only), and a vote that compared what
came back took the odd one out for a dissenter and quarantined a healthy server. Here each leg
is asked for the outputs the vote compares, in its own names, so the three agree 3/3 on rows
they really agree on (found by asking each directly first), and nobody is struck.

Ours serves the fallback's logistic regression, trained as the peers' is (`train_digits`), so
that their probabilities agree within the vote's numeric tolerance as well as their labels.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as triton

from replicas.dataset import load_split
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import PeerProcess
from tests.support.processes import ReplicaProcess, start_replica

pytestmark = [pytest.mark.integration, pytest.mark.peers]

LOGREG = Path(__file__).resolve().parents[2] / "fallback_models" / "digits-logreg.onnx"
CANDIDATES = 120  # test-split rows asked directly; those the three agree on are voted
BATCH = 4
REQUESTS = 200
ATOL, RTOL = 1e-3, 1e-2  # the vote's numeric tolerances (its defaults)
SCORES = {"label": {"name": "predict", "shape": [-1]}, "probabilities": "predict_proba"}
Floats = npt.NDArray[np.float32]


def _replica_pool(replica: ReplicaProcess, replica_id: str) -> dict[str, Any]:
    return {"model": "digits", "replicas": [{"id": replica_id, "url": replica.url}]}


@pytest.fixture(scope="module")
def ours() -> Iterator[list[ReplicaProcess]]:
    replicas = [start_replica(LOGREG, name="digits") for _ in range(2)]
    yield replicas
    for replica in replicas:
        replica.cleanup()


@pytest.fixture(scope="module")
def gateway(
    ours: list[ReplicaProcess], mlserver: PeerProcess, kserve: PeerProcess
) -> Iterator[GatewayProcess]:
    three = ["ours", "mlserver", "kserve"]
    wait = {"quorum": 2, "straggler_grace_ms": 5000}  # all three vote, even on a busy machine
    config = {
        "pools": {
            "ours": _replica_pool(ours[0], "ours-a"),
            "ours-again": _replica_pool(ours[1], "ours-b"),
            "mlserver": {
                "model": "digits",
                "version": "1",
                "binary_tensors": False,
                "replicas": [{"id": "mlserver-0", "url": mlserver.url}],
                "tensors": {"outputs": SCORES},
            },
            "kserve": {
                "model": "digits",
                "replicas": [{"id": "kserve-0", "url": kserve.url}],
                "tensors": {"inputs": {"input": "input-0"}, "outputs": SCORES},
            },
        },
        "models": {
            "vote": {"vote": {"pools": three, **wait}},
            "vote-scores": {
                "vote": {"pools": three, **wait, "outputs": ["label", "probabilities"]}
            },
            # the issue's vote: two of ours would answer scores, MLServer only its labels
            "vote-issue": {"vote": {"pools": ["ours", "ours-again", "mlserver"], **wait}},
        },
    }
    proc = start_gateway(config)
    yield proc
    proc.cleanup()


def _body(x: Floats, input_name: str = "input", **extra: object) -> dict[str, Any]:
    tensor = {"name": input_name, "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
    return {"inputs": [tensor], **extra}


def _direct(url: str, model_path: str, x: Floats, input_name: str, names: list[str]) -> list[Any]:
    """Each named output of one server, asked directly."""
    body = _body(x, input_name, outputs=[{"name": n} for n in names])
    reply = httpx.post(f"{url}{model_path}/infer", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    outputs = {o["name"]: o for o in reply.json()["outputs"]}
    return [np.reshape(outputs[n]["data"], (len(x), -1)) for n in names]


@pytest.fixture(scope="module")
def agreeing(ours: list[ReplicaProcess], mlserver: PeerProcess, kserve: PeerProcess) -> Floats:
    """Test-split rows on which the three servers' labels agree and their probabilities are
    within the vote's tolerance of the median, asked directly."""
    x: Floats = load_split()[1][:CANDIDATES].astype(np.float32)
    answers = [
        _direct(ours[0].url, "/v2/models/digits", x, "input", ["label", "probabilities"]),
        _direct(
            mlserver.url, "/v2/models/digits/versions/1", x, "input", ["predict", "predict_proba"]
        ),
        _direct(kserve.url, "/v2/models/digits", x, "input-0", ["predict", "predict_proba"]),
    ]
    labels = np.stack([a[0].ravel() for a in answers])
    scores = np.stack([a[1] for a in answers]).astype(np.float64)
    median = np.median(scores, axis=0)
    close = np.isclose(scores, median[None], atol=ATOL, rtol=RTOL).all(axis=(0, 2))
    rows = (labels == labels[0]).all(axis=0) & close
    assert rows.sum() >= 20, f"only {rows.sum()} of {CANDIDATES} rows agree"
    agreed: Floats = x[rows]
    return agreed


def _batches(rows: Floats, count: int, seed: int) -> Iterator[Floats]:
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield rows[rng.choice(len(rows), BATCH, replace=False)]


def _state(gateway: GatewayProcess) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    return state


def _assert_nobody_struck(gateway: GatewayProcess, model: str) -> None:
    state = _state(gateway)
    replicas = [r for pool in state["pools"] for r in pool["replicas"]]
    assert not [r["id"] for r in replicas if r["quarantined"] or r["ejected"]], replicas
    assert all(r["failures"] == 0 for r in replicas), replicas
    suspects = state["suspects"][model]
    assert all(s["dissents"] == 0 for s in suspects.values()), suspects


ASKED: dict[str, dict[str, object]] = {
    "none": {},  # curl's default
    "label": {"outputs": [{"name": "label"}]},
    "probabilities": {"outputs": [{"name": "probabilities"}]},
}


@pytest.mark.parametrize("asked", list(ASKED))
def test_a_vote_over_ours_mlserver_and_kserve_is_unanimous(
    gateway: GatewayProcess, agreeing: Floats, asked: str
) -> None:
    """≥ 200 requests each, no outputs named or each output alone: 3/3, nobody struck."""
    expected = ["label"] if asked in ("none", "label") else ["probabilities"]
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for x in _batches(agreeing, REQUESTS, seed=len(asked)):
            body = {**_body(x), **ASKED[asked]}
            reply = client.post("/v2/models/vote/infer", json=body)
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-vote"] == "3/3", reply.json()
            assert [o["name"] for o in reply.json()["outputs"]] == expected
    _assert_nobody_struck(gateway, "vote")


def test_tritonclients_implicit_outputs_and_the_votes_own(
    gateway: GatewayProcess, agreeing: Floats
) -> None:
    """tritonclient names no outputs and asks binary: the vote's outputs come back, binary; a
    vote that declares label and probabilities asks every leg for both (in its names)."""
    client = triton.InferenceServerClient(gateway.url.removeprefix("http://"))
    for model, names in (("vote", ["label"]), ("vote-scores", ["label", "probabilities"])):
        for x in _batches(agreeing, REQUESTS // 4, seed=len(model)):
            tensor = triton.InferInput("input", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x, binary_data=True)
            result = client.infer(model, [tensor])
            response = result.get_response()
            assert response["parameters"] == {"vote": "3/3"}
            assert [o["name"] for o in response["outputs"]] == names
            labels = result.as_numpy("label")
            assert labels is not None and labels.shape == (BATCH,)
        _assert_nobody_struck(gateway, model)


def test_the_issues_vote_no_longer_strikes_mlserver(
    gateway: GatewayProcess, agreeing: Floats
) -> None:
    """Two of ours (label and probabilities by default) and MLServer (predict by default): it
    "dissented on 4 of 4 rows" of every request and was quarantined after 26 of them."""
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for x in _batches(agreeing, REQUESTS, seed=7):
            reply = client.post("/v2/models/vote-issue/infer", json=_body(x))
            assert reply.status_code == 200, reply.text
            assert reply.headers["x-vote"] == "3/3", reply.json()
    _assert_nobody_struck(gateway, "vote-issue")

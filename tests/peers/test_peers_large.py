"""602 KB inputs through the gateway: tritonclient's answers identical to the server's own.

An image's worth of tensor bytes (1×3×224×224 FP32 = 602,112 bytes) is 2,352 digits rows of 64
FP32: the same bytes on the wire, on the models every peer serves. tritonclient in binary mode
(its default) and in JSON mode, through the gateway and straight to the server: our replicas
(binary tensor data end to end), KServe in binary mode and MLServer in JSON mode (the gateway
speaks JSON to both, as their metadata says; KServe itself refuses tritonclient's JSON mode
with a 400 when called directly: no Content-Type), the answers compared value for value.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as triton

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import PeerProcess
from tests.support.processes import REPO_ROOT, ReplicaProcess, start_replica

pytestmark = [pytest.mark.integration, pytest.mark.peers]

ROWS = 2352  # x 64 FP32 = 602,112 bytes, one 224x224 RGB image's
INPUT = {"ours": "input", "mlserver": "input", "kserve": "input-0"}
OUTPUT = {"ours": "probabilities", "mlserver": "predict_proba", "kserve": "predict_proba"}


@pytest.fixture(scope="module")
def ours() -> Iterator[ReplicaProcess]:
    proc = start_replica(REPO_ROOT / "models" / "digits-mlp.onnx", name="digits")
    yield proc
    proc.cleanup()


@pytest.fixture(scope="module")
def gateway(
    ours: ReplicaProcess, mlserver: PeerProcess, kserve: PeerProcess
) -> Iterator[GatewayProcess]:
    urls = {"ours": ours.url, "mlserver": mlserver.url, "kserve": kserve.url}
    pools = {
        n: {"model": "digits", "replicas": [{"id": f"{n}-0", "url": u}]} for n, u in urls.items()
    }
    pools["mlserver"]["version"] = "1"
    models = {n: {"pool": n, "max_rows": ROWS, "timeout_ms": 10_000} for n in pools}
    proc = start_gateway({"pools": pools, "models": models})
    yield proc
    proc.cleanup()


def _infer(url: str, model: str, name: str, x: np.ndarray[Any, Any], binary: bool) -> Any:
    client = triton.InferenceServerClient(url.removeprefix("http://"), network_timeout=60.0)
    tensor = triton.InferInput(INPUT[name], list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    output = triton.InferRequestedOutput(OUTPUT[name], binary_data=binary)
    return client.infer(model, [tensor], outputs=[output]).as_numpy(OUTPUT[name])


CASES = [("ours", True), ("ours", False), ("kserve", True), ("mlserver", False)]


@pytest.mark.parametrize(
    ("name", "binary"), CASES, ids=[f"{n}-{'binary' if b else 'json'}" for n, b in CASES]
)
def test_602_kb_inputs_answer_as_the_server_does(
    request: pytest.FixtureRequest, gateway: GatewayProcess, name: str, binary: bool
) -> None:
    rng = np.random.default_rng(602)
    x = rng.uniform(0, 16, (ROWS, 64)).astype(np.float32)
    assert x.nbytes == 602_112
    server = request.getfixturevalue(name)
    direct = _infer(server.url, "digits", name, x, binary)
    through = _infer(gateway.url, name, name, x, binary)
    assert through is not None and direct is not None
    assert through.shape == direct.shape == (ROWS, 10)
    assert np.array_equal(through, direct)

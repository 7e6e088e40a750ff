"""tritonclient's three modes through the gateway to MLServer and KServe with no pool override.

Neither server lists ``binary_tensor_data`` among its extensions (MLServer answers a binary
body with a 500, which used to cost it a failure a request), so the gateway learns from their
metadata to send them JSON and answers the client in the form it asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as triton

from tests.peers.conftest import Rows
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import PeerProcess

pytestmark = [pytest.mark.integration, pytest.mark.peers]

INPUT = {"mlserver": "input", "kserve": "input-0"}  # KServe's metadata lists input-0
MODES = {  # input as binary, outputs as binary
    "binary": (True, True),
    "binary-outputs": (False, True),
    "json": (False, False),
    "implicit": (True, None),  # no outputs named: tritonclient asks binary_data_output
}


@pytest.fixture(scope="module")
def gateway(mlserver: PeerProcess, kserve: PeerProcess) -> Iterator[GatewayProcess]:
    pools = {  # no binary_tensors: learned from each server's metadata
        "mlserver": {
            "model": "digits",
            "version": "1",
            "replicas": [{"id": "mlserver-0", "url": mlserver.url}],
        },
        "kserve": {"model": "digits", "replicas": [{"id": "kserve-0", "url": kserve.url}]},
    }
    proc = start_gateway({"pools": pools, "models": {n: {"pool": n} for n in pools}})
    yield proc
    proc.cleanup()


def _direct(proc: PeerProcess, rows: Rows, name: str) -> list[int]:
    tensor = {
        "name": name,
        "shape": list(rows.x.shape),
        "datatype": "FP32",
        "data": rows.x.ravel().tolist(),
    }
    reply = httpx.post(f"{proc.url}/v2/models/digits/infer", json={"inputs": [tensor]}, timeout=10)
    assert reply.status_code == 200, reply.text
    labels: list[int] = np.ravel(reply.json()["outputs"][0]["data"]).tolist()
    return labels


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("name", ["mlserver", "kserve"])
def test_tritonclient_modes_to_each_server_without_an_override(
    request: pytest.FixtureRequest, gateway: GatewayProcess, digits_rows: Rows, name: str, mode: str
) -> None:
    direct = _direct(request.getfixturevalue(name), digits_rows, INPUT[name])
    binary_in, binary_out = MODES[mode]
    client = triton.InferenceServerClient(gateway.url.removeprefix("http://"))
    tensor = triton.InferInput(INPUT[name], list(digits_rows.x.shape), "FP32")
    tensor.set_data_from_numpy(digits_rows.x, binary_data=binary_in)
    outputs: Any = None
    if binary_out is not None:
        outputs = [triton.InferRequestedOutput("predict", binary_data=binary_out)]
    result = client.infer(name, [tensor], outputs=outputs)
    labels = result.as_numpy("predict")
    assert labels is not None and labels.ravel().tolist() == direct
    assert (labels.ravel() == digits_rows.y).mean() >= 0.9
    answer = result.get_response()
    [output] = [o for o in answer["outputs"] if o["name"] == "predict"]
    # binary outputs when asked for (explicitly or by tritonclient's default), else JSON data
    assert ("binary_data_size" in (output.get("parameters") or {})) is (binary_out is not False)


def test_no_server_was_charged(gateway: GatewayProcess) -> None:
    """Runs after the modes above (file order): every answer was a 200, none a failure."""
    state = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    replicas = {r["id"]: r for p in state["pools"] for r in p["replicas"]}
    for replica_id in ("mlserver-0", "kserve-0"):
        replica = replicas[replica_id]
        assert replica["requests"] >= 4, replica
        assert replica["failures"] == 0 and not replica["ejected"], replica

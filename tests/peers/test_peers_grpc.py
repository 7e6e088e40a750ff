"""The real peers as gRPC replicas: KServe 0.21 (``--enable_grpc``) and MLServer 1.7.1 (its gRPC
port) behind ``grpc://`` pools of a real gateway that REST clients call. What the gateway
answers is what each peer answers when called directly over gRPC (tritonclient.grpc), and
what it answers directly over REST."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc.aio
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.peers.conftest import Rows
from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.peers import KSERVE, PeerProcess, start_kserve
from v2proto.codec import HEADER_LENGTH, decode_infer_response, encode_infer_request
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_to_rest_response
from v2proto.grpc.service import Stub

pytestmark = [pytest.mark.integration, pytest.mark.peers]

# each peer's tensor names (KServe's model names its input input-0; MLServer takes any name)
INPUT = {"mlserver": "input", "kserve": "input-0"}
OUTPUT = "predict"


@pytest.fixture(scope="module")
def kserve_grpc() -> Iterator[PeerProcess]:
    reason = KSERVE.missing()
    if reason is not None:
        pytest.skip(reason)
    proc = start_kserve(grpc=True)
    yield proc
    proc.cleanup()


@pytest.fixture(scope="module")
def peers(mlserver: PeerProcess, kserve_grpc: PeerProcess) -> dict[str, PeerProcess]:
    return {"mlserver": mlserver, "kserve": kserve_grpc}


@pytest.fixture(scope="module")
def gateway(peers: dict[str, PeerProcess]) -> Iterator[GatewayProcess]:
    def pool(proc: PeerProcess, **extra: Any) -> dict[str, Any]:
        replica = {"id": f"{proc.peer.name}-grpc", "url": f"grpc://{proc.grpc_target}"}
        return {"model": "digits", "replicas": [replica], **extra}

    config = {
        "pools": {
            "mlserver": pool(peers["mlserver"], version="1"),
            "kserve": pool(peers["kserve"]),  # KServe serves no versioned paths
        },
        "models": {"mlserver": {"pool": "mlserver"}, "kserve": {"pool": "kserve"}},
    }
    proc = start_gateway(config)
    yield proc
    proc.cleanup()


async def _direct(target: str, request: Any) -> Any:
    async with grpc.aio.insecure_channel(target) as channel:
        return await Stub(channel).model_infer(request, timeout=30)


def direct_grpc(proc: PeerProcess, x: np.ndarray[Any, Any], version: str) -> Any:
    """The peer's own answer over gRPC, typed contents (KServe 0.21 fails raw ones)."""
    assert proc.grpc_target is not None
    request = pb.ModelInferRequest(model_name="digits", model_version=version, id="direct")
    tensor = request.inputs.add(name=INPUT[proc.peer.name], datatype="FP32", shape=x.shape)
    tensor.contents.fp32_contents.extend(x.ravel().tolist())
    request.outputs.add(name=OUTPUT)
    reply = asyncio.run(_direct(proc.grpc_target, request))
    body = grpc_to_rest_response(reply)
    return decode_infer_response(body.body, body.json_length).outputs[OUTPUT]


def test_tritonclient_grpc_reaches_mlserver_directly(
    mlserver: PeerProcess, digits_rows: Rows
) -> None:
    """tritonclient.grpc (raw contents) against MLServer's gRPC port: the same labels."""
    assert mlserver.grpc_target is not None
    client = grpcclient.InferenceServerClient(mlserver.grpc_target)
    try:
        x = digits_rows.x.astype(np.float32)
        tensor = grpcclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        labels = client.infer("digits", [tensor], model_version="1").as_numpy(OUTPUT)
    finally:
        client.close()
    assert np.array_equal(labels.ravel(), direct_grpc(mlserver, x, "1").ravel())


@pytest.mark.parametrize("name", ["mlserver", "kserve"])
@pytest.mark.parametrize("binary", [False, True])
def test_a_grpc_pool_answers_what_the_peer_answers_directly(
    peers: dict[str, PeerProcess],
    gateway: GatewayProcess,
    digits_rows: Rows,
    name: str,
    binary: bool,
) -> None:
    proc = peers[name]
    x = digits_rows.x.astype(np.float32)
    sent = encode_infer_request(
        {INPUT[name]: x},
        [OUTPUT],
        binary_inputs=binary,
        binary_outputs=binary,
        request_id="through-gateway",
    )
    r = httpx.post(
        f"{gateway.url}/v2/models/{name}/infer",
        content=sent.body,
        headers=sent.headers(),
        timeout=30,
    )
    assert r.status_code == 200, (r.text, gateway.log_text()[-3000:])
    assert r.headers["x-served-by"] == f"{name}-grpc"
    through = decode_infer_response(r.content, r.headers.get(HEADER_LENGTH))
    assert through.id == "through-gateway"
    expected = direct_grpc(proc, x, "1" if name == "mlserver" else "")
    assert through.outputs[OUTPUT].dtype == expected.dtype
    assert np.array_equal(through.outputs[OUTPUT], expected)
    plain = encode_infer_request({INPUT[name]: x}, [OUTPUT])
    rest = httpx.post(
        f"{proc.url}/v2/models/digits/infer",
        content=plain.body,
        headers=plain.headers(),
        timeout=30,
    )
    assert np.array_equal(decode_infer_response(rest.content).outputs[OUTPUT], expected)


@pytest.mark.parametrize("name", ["mlserver", "kserve"])
def test_grpc_peers_are_probed_healthy_and_their_metadata_read(
    gateway: GatewayProcess, name: str
) -> None:
    state = httpx.get(f"{gateway.url}/admin/state", timeout=5).json()
    (pool,) = [p for p in state["pools"] if p["name"] == name]
    assert pool["replicas"][0]["healthy"] is True  # ModelReady over gRPC
    meta = httpx.get(f"{gateway.url}/v2/models/{name}", timeout=10)
    assert meta.status_code == 200, meta.text
    assert meta.json()["name"] == name

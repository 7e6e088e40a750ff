"""The replica's V2 gRPC service in-process: a real grpc.aio server over the ReplicaApp with the
committed fallback ONNX model, called through a real channel, checked against the REST door."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import numpy as np
import orjson
import pytest

from gateway.config.endpoint import Endpoint
from gateway.config.headers import NO_HEADERS
from gateway.config.tls import TlsConfig
from gateway.errors import UpstreamConnectError
from gateway.upstream.transport.grpc_client import GrpcTransport
from replicas.dataset import Split
from replicas.fault_auth import FaultKey
from replicas.faults import FaultInjector
from replicas.grpc_server import grpc_server
from replicas.serve import ServeOptions, grpc_credentials
from replicas.server import ReplicaApp
from tests.support.faults import FAULT_KEY
from tests.support.tls import Certificates
from v2proto.codec import decode_infer_response
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_to_rest_response
from v2proto.grpc.service import Stub

INFER = "/v2/models/digits/infer"


class Replica:
    def __init__(self, app: ReplicaApp, stub: Stub, rest: httpx.AsyncClient) -> None:
        self.app, self.stub, self.rest = app, stub, rest

    @property
    def faults(self) -> FaultInjector:
        assert isinstance(self.app.faults, FaultInjector)
        return self.app.faults


@pytest.fixture
async def replica(model_path: Path) -> AsyncIterator[Replica]:
    faults = FaultInjector(random.Random(1))
    app = ReplicaApp(model_path, name="digits", faults=faults, fault_key=FaultKey(FAULT_KEY))
    await app.startup()
    server, port = grpc_server(app, "127.0.0.1:0", max_message_bytes=1 << 22)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    rest = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r")
    try:
        yield Replica(app, Stub(channel), rest)
    finally:
        await rest.aclose()
        await channel.close()
        await server.stop(None)
        await app.shutdown()


def request(x: np.ndarray[Any, Any], *, raw: bool, request_id: str = "q1") -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="digits", id=request_id)
    entry = message.inputs.add(name="input", datatype="FP32", shape=list(x.shape))
    if raw:
        message.raw_input_contents.append(x.astype(np.float32).tobytes())
    else:
        entry.contents.fp32_contents.extend(x.ravel().tolist())
    return message


async def code_of(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code(), caught.value.details() or ""


async def test_health_and_metadata(replica: Replica) -> None:
    stub = replica.stub
    assert (await stub.server_live(pb.ServerLiveRequest())).live
    assert (await stub.server_ready(pb.ServerReadyRequest())).ready
    assert (await stub.model_ready(pb.ModelReadyRequest(name="digits", version="1"))).ready
    meta = await stub.model_metadata(pb.ModelMetadataRequest(name="digits"))
    assert (meta.name, list(meta.versions), meta.platform) == ("digits", ["1"], "onnxruntime_onnx")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
        ("input", "FP32", [-1, 64])
    ]
    server = await stub.server_metadata(pb.ServerMetadataRequest())
    assert (server.name, list(server.extensions)) == ("replica", ["binary_tensor_data"])
    assert await code_of(stub.model_ready(pb.ModelReadyRequest(name="nope"))) == (
        grpc.StatusCode.NOT_FOUND,
        "model 'nope' not found",
    )
    replica.app.begin_shutdown()
    assert not (await stub.server_ready(pb.ServerReadyRequest())).ready


@pytest.mark.parametrize("raw", [False, True])
async def test_infer_answers_as_the_rest_door_does(
    replica: Replica, split: Split, raw: bool
) -> None:
    x = split.X_test[:5].astype(np.float32)
    reply = await replica.stub.model_infer(request(x, raw=raw))
    assert (reply.model_name, reply.model_version, reply.id) == ("digits", "1", "q1")
    assert bool(reply.raw_output_contents) is raw  # raw in, raw out (as Triton answers)
    tensor = {"name": "input", "shape": list(x.shape), "datatype": "FP32", "data": x.tolist()}
    rest = await replica.rest.post(INFER, content=orjson.dumps({"inputs": [tensor]}))
    expected = decode_infer_response(rest.content).outputs
    got_binary = grpc_to_rest_response(reply)
    got = decode_infer_response(got_binary.body, got_binary.json_length).outputs
    assert list(got) == list(expected)
    for name, arr in expected.items():
        assert got[name].dtype == arr.dtype and np.array_equal(got[name], arr)


async def test_bad_input_is_invalid_argument_with_the_rest_message(replica: Replica) -> None:
    message = request(np.zeros((1, 63), np.float32), raw=True)
    code, details = await code_of(replica.stub.model_infer(message))
    rest = await replica.rest.post(
        INFER,
        content=orjson.dumps(
            {"inputs": [{"name": "input", "shape": [1, 63], "datatype": "FP32", "data": [0] * 63}]}
        ),
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert rest.status_code == 400 and details == rest.json()["error"]
    wrong = pb.ModelInferRequest(model_name="digits", model_version="7")
    assert (await code_of(replica.stub.model_infer(wrong)))[0] == grpc.StatusCode.NOT_FOUND


async def test_not_loaded_is_unavailable(model_path: Path) -> None:
    app = ReplicaApp(model_path, name="digits")  # never started: no model yet
    server, port = grpc_server(app, "127.0.0.1:0", max_message_bytes=1 << 20)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = Stub(channel)
            assert not (await stub.server_ready(pb.ServerReadyRequest())).ready
            code, details = await code_of(stub.model_infer(request(np.zeros((1, 64)), raw=True)))
            assert code == grpc.StatusCode.UNAVAILABLE and "model is loading" in details
    finally:
        await server.stop(None)
        await app.shutdown()


async def test_faults_apply_to_grpc(replica: Replica, split: Split) -> None:
    x = split.X_test[:4].astype(np.float32)
    stub, faults = replica.stub, replica.faults
    faults.update({"error_rate": 1.0})
    assert await code_of(stub.model_infer(request(x, raw=True))) == (
        grpc.StatusCode.INTERNAL,
        "injected fault",
    )
    faults.update({"error_rate": 0.0, "hang": True})
    code, _ = await code_of(stub.model_infer(request(x, raw=True), timeout=0.2))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    faults.update({"hang": False, "ready": False})
    assert not (await stub.server_ready(pb.ServerReadyRequest())).ready
    faults.clear()
    good = await stub.model_infer(request(x, raw=True))
    faults.update({"corrupt_rate": 1.0})
    bad = await stub.model_infer(request(x, raw=True))
    labels = [np.frombuffer(r.raw_output_contents[0], np.int64) for r in (good, bad)]
    assert (labels[0] != labels[1]).all()


async def test_wrong_id_fault_answers_another_requests_id(replica: Replica, split: Split) -> None:
    x = split.X_test[:1].astype(np.float32)
    replica.faults.update({"wrong_id": True})
    first = await replica.stub.model_infer(request(x, raw=True, request_id="a"))
    second = await replica.stub.model_infer(request(x, raw=True, request_id="b"))
    assert (first.id, second.id) == ("not-a", "a")
    tensor = {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": x.tolist()}
    rest = await replica.rest.post(INFER, content=orjson.dumps({"id": "c", "inputs": [tensor]}))
    assert rest.json()["id"] == "b"  # the REST door too: the request answered before
    replica.faults.update({"wrong_id": False})
    assert (await replica.stub.model_infer(request(x, raw=True, request_id="d"))).id == "d"


async def test_grpc_port_takes_the_rest_ports_tls_files_mutual_tls_included(
    model_path: Path, tmp_path: Path
) -> None:
    certs = Certificates.make(tmp_path)
    options = ServeOptions(
        model=model_path,
        name="digits",
        port=0,
        grpc_port=0,
        ssl_certfile=certs.server_cert,
        ssl_keyfile=certs.server_key,
        ssl_ca_certs=certs.ca,
    )
    app = ReplicaApp(model_path, name="digits")
    await app.startup()
    server, port = grpc_server(
        app, "127.0.0.1:0", credentials=grpc_credentials(options), max_message_bytes=1 << 20
    )
    await server.start()
    transport = GrpcTransport()
    try:

        def endpoint(**tls: str) -> Endpoint:
            url = Endpoint.parse(f"grpcs://127.0.0.1:{port}")
            return url.with_pool(TlsConfig(ca_file=str(certs.ca), **tls), NO_HEADERS)

        client = endpoint(cert_file=str(certs.client_cert), key_file=str(certs.client_key))
        reply = await transport.request(client, "GET", "/v2/models/digits/ready", timeout=5)
        assert reply.status == 200
        with pytest.raises(UpstreamConnectError):  # no client certificate: refused
            await transport.request(
                endpoint(server_name="localhost"), "GET", "/v2/models/digits/ready", timeout=5
            )
    finally:
        await transport.aclose()
        await server.stop(None)
        await app.shutdown()

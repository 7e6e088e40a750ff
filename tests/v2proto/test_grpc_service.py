"""The gRPC spike, kept as a test: a grpc.aio server and a grpc.aio channel inside one uvloop
event loop (the gateway's and the replica's loop), through the hand-written service glue, and
our messages beside tritonclient's own ``inference`` messages in one process."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import pytest
import uvloop

from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import METHODS, SERVICE, Stub, generic_handler


async def _ready(request: pb.ServerReadyRequest, context: Any) -> pb.ServerReadyResponse:
    return pb.ServerReadyResponse(ready=True)


async def _infer(request: pb.ModelInferRequest, context: Any) -> pb.ModelInferResponse:
    if request.model_name == "missing":
        await context.abort(grpc.StatusCode.NOT_FOUND, "no model 'missing'")
    return pb.ModelInferResponse(
        model_name=request.model_name, id=request.id, raw_output_contents=request.raw_input_contents
    )


async def _round_trip() -> tuple[bool, pb.ModelInferResponse, grpc.StatusCode, str]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (generic_handler({"ServerReady": _ready, "ModelInfer": _infer}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = Stub(channel)
            ready = (await stub.server_ready(pb.ServerReadyRequest(), timeout=5)).ready
            reply = await stub.model_infer(
                pb.ModelInferRequest(model_name="m", id="a1", raw_input_contents=[b"\x01\x02"]),
                timeout=5,
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.model_infer(pb.ModelInferRequest(model_name="missing"), timeout=5)
            with pytest.raises(grpc.aio.AioRpcError) as unimplemented:
                await stub.server_live(pb.ServerLiveRequest(), timeout=5)
            assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED
            return ready, reply, caught.value.code(), caught.value.details() or ""
    finally:
        await server.stop(None)


def test_grpc_aio_server_and_channel_in_a_uvloop_loop() -> None:
    ready, reply, code, details = uvloop.run(_round_trip())
    assert ready is True
    got = (reply.model_name, reply.id, list(reply.raw_output_contents))
    assert got == ("m", "a1", [b"\x01\x02"])
    assert code == grpc.StatusCode.NOT_FOUND
    assert details == "no model 'missing'"


def test_the_service_path_is_the_one_every_v2_client_calls() -> None:
    assert SERVICE == "inference.GRPCInferenceService"
    assert {m.path for m in METHODS} >= {
        "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ServerReady",
        "/inference.GRPCInferenceService/RepositoryIndex",
    }


def test_our_messages_live_beside_tritonclients_in_one_process() -> None:
    """Protobuf refuses a second definition of a full name (``inference.ModelInferRequest``):
    ours are ``v2proto.inference.*``, and the wire forms are the same (field numbers)."""
    import tritonclient.grpc.service_pb2 as triton

    ours = pb.ModelInferRequest(model_name="m", id="x", raw_input_contents=[b"abc"])
    ours.inputs.add(name="i", datatype="FP32", shape=[1, 2])
    theirs = triton.ModelInferRequest.FromString(ours.SerializeToString())
    assert (theirs.model_name, theirs.id, theirs.inputs[0].shape) == ("m", "x", [1, 2])
    assert pb.ModelInferRequest.DESCRIPTOR.full_name == "v2proto.inference.ModelInferRequest"

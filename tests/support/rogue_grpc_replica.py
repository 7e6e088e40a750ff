"""A misbehaving V2 gRPC "replica" for integration tests: healthy to probes, garbage to infers.

It answers ServerLive, ServerReady, ModelReady, ServerMetadata and ModelMetadata as a healthy
server of the digits model would, so the gateway's health probes keep it in the pool, and
answers every ModelInfer with bytes that are not a ``ModelInferResponse`` (a length-delimited
field cut short): what gRPC's deserializer turns into None on the gateway's side.

Run as ``python -m tests.support.rogue_grpc_replica --port P``; it prints ``listening`` once
bound, and is stopped by PID like every process a test starts.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import grpc
import grpc.aio

from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import generic_handler

GARBAGE = b"\x0a\xff\xff\xff\xff not protobuf"


class Garbage:
    """A "message" whose serialised form is `GARBAGE`."""

    def SerializeToString(self) -> bytes:  # the message method gRPC calls
        return GARBAGE


async def live(request: Any, context: Any) -> Any:
    return pb.ServerLiveResponse(live=True)


async def ready(request: Any, context: Any) -> Any:
    return pb.ServerReadyResponse(ready=True)


async def model_ready(request: Any, context: Any) -> Any:
    return pb.ModelReadyResponse(ready=True)


async def server_metadata(request: Any, context: Any) -> Any:
    return pb.ServerMetadataResponse(name="rogue", version="1", extensions=["binary_tensor_data"])


async def model_metadata(request: Any, context: Any) -> Any:
    reply = pb.ModelMetadataResponse(name=request.name, versions=["1"], platform="rogue")
    reply.inputs.add(name="input", datatype="FP32", shape=[-1, 64])
    reply.outputs.add(name="label", datatype="INT64", shape=[-1])
    return reply


async def model_infer(request: Any, context: Any) -> Any:
    return Garbage()


async def serve(port: int) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(
        (
            generic_handler(
                {
                    "ServerLive": live,
                    "ServerReady": ready,
                    "ModelReady": model_ready,
                    "ServerMetadata": server_metadata,
                    "ModelMetadata": model_metadata,
                    "ModelInfer": model_infer,
                }
            ),
        )
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("listening", flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(parser.parse_args().port))


if __name__ == "__main__":
    main()

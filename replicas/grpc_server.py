"""The replica's V2 gRPC service: the same model, readiness, faults and metrics as its REST app.

`ReplicaGrpc` answers ``inference.GRPCInferenceService`` beside the REST app in the same
process and event loop (``replica serve --grpc-port``): it holds no state of its own but reads
the `ReplicaApp`'s (the loaded model, draining, injected faults) and runs inference in the
app's thread pool, never on the loop. A request passes the REST parser's checks (the
signature, shapes, datatypes: `v2proto.grpc.request`), so both doors refuse the same bad input
with the same message.

Failures map to gRPC status codes by meaning: a bad request is INVALID_ARGUMENT, an unknown
model NOT_FOUND, not ready UNAVAILABLE, an injected or real failure INTERNAL (the REST 500).
An injected hang holds the RPC, a crash ends the process, a corrupted answer and a wrong id
reach the client as they would over REST.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NoReturn

import grpc
import grpc.aio

from replicas.errors import BadRequest, NotFound, NotReady, ReplicaError
from replicas.model import PLATFORM, OnnxModel
from replicas.server import SERVER_METADATA, ReplicaApp
from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_response
from v2proto.grpc.request import grpc_infer_request
from v2proto.grpc.service import generic_handler
from v2proto.tensors import nonfinite_message, nonfinite_output

Context = grpc.aio.ServicerContext[Any, Any]

# The gRPC code of each replica error status (what a REST client reads as the HTTP status).
STATUS_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    503: grpc.StatusCode.UNAVAILABLE,
}


async def _abort(context: Context, error: ReplicaError) -> NoReturn:
    await context.abort(STATUS_CODES.get(error.status, grpc.StatusCode.INTERNAL), error.message)
    raise AssertionError("abort returns only by raising")  # pragma: no cover


class ReplicaGrpc:
    """The V2 gRPC methods of one `ReplicaApp`."""

    def __init__(self, app: ReplicaApp) -> None:
        self.app = app

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(
            {
                "ServerLive": self.server_live,
                "ServerReady": self.server_ready,
                "ModelReady": self.model_ready,
                "ServerMetadata": self.server_metadata,
                "ModelMetadata": self.model_metadata,
                "ModelInfer": self.model_infer,
            }
        )

    async def server_live(self, request: pb.ServerLiveRequest, context: Context) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: pb.ServerReadyRequest, context: Context) -> Any:
        return pb.ServerReadyResponse(ready=self.app.not_ready_reason() is None)

    async def model_ready(self, request: pb.ModelReadyRequest, context: Context) -> Any:
        try:
            self._check_model(request.name, request.version)
        except ReplicaError as exc:
            await _abort(context, exc)
        return pb.ModelReadyResponse(ready=self.app.not_ready_reason() is None)

    async def server_metadata(self, request: pb.ServerMetadataRequest, context: Context) -> Any:
        return pb.ServerMetadataResponse(
            name=str(SERVER_METADATA["name"]),
            version=str(SERVER_METADATA["version"]),
            extensions=list(SERVER_METADATA["extensions"]),
        )

    async def model_metadata(self, request: pb.ModelMetadataRequest, context: Context) -> Any:
        try:
            model = self._loaded(request.name, request.version)
        except ReplicaError as exc:
            await _abort(context, exc)
        reply = pb.ModelMetadataResponse(
            name=self.app.name, versions=[self.app.version], platform=PLATFORM
        )
        for spec in model.signature.inputs:
            reply.inputs.add(name=spec.name, datatype=spec.datatype, shape=list(spec.shape))
        for spec in model.signature.outputs:
            reply.outputs.add(name=spec.name, datatype=spec.datatype, shape=list(spec.shape))
        return reply

    async def model_infer(self, request: pb.ModelInferRequest, context: Context) -> Any:
        app = self.app
        started = time.perf_counter()
        status, rows = 500, 0
        app.load.began()
        try:
            model = self._loaded(request.model_name, request.model_version)
            try:
                parsed = grpc_infer_request(request, model.signature)
            except ProtocolError as exc:
                raise BadRequest(exc.message) from exc
            await app.faults.before_infer(parsed.inputs)
            loop = asyncio.get_running_loop()
            outputs = await loop.run_in_executor(app.executor, model.run, parsed.inputs)
            overflowed = nonfinite_output(outputs)
            if overflowed is not None:
                raise BadRequest(nonfinite_message(overflowed))
            outputs = app.faults.after_infer(outputs)
            names = [o.name for o in parsed.requested(model.signature.output_names)]
            reply = grpc_response(
                app.name,
                app.version,
                app.faults.answer_id(parsed.id),
                [(name, outputs[name]) for name in names],
                raw=bool(request.raw_input_contents),
            )
            status, rows = 200, parsed.rows
            return reply
        except ReplicaError as exc:
            status = exc.status
            await _abort(context, exc)
        except asyncio.CancelledError:
            status = 503
            raise
        finally:
            app.load.ended()
            app.metrics.observe(status, time.perf_counter() - started, rows)

    def _check_model(self, name: str, version: str) -> None:
        if name != self.app.name:
            raise NotFound(f"model '{name}' not found")
        if version and version != self.app.version:
            raise NotFound(f"version '{version}' of model '{name}' not found")

    def _loaded(self, name: str, version: str) -> OnnxModel:
        self._check_model(name, version)
        model = self.app.model
        if model is None:
            raise NotReady(f"model '{self.app.name}' is not ready: {self.app.not_ready_reason()}")
        return model


def grpc_server(
    app: ReplicaApp,
    address: str,
    *,
    credentials: grpc.ServerCredentials | None = None,
    max_message_bytes: int,
) -> tuple[grpc.aio.Server, int]:
    """A gRPC server for ``app`` bound to ``address`` (host:port; port 0: any free one), not yet
    started; and its port. `OSError` when the address cannot be bound."""
    options = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.so_reuseport", 0),  # a port in use is an error, as for the REST port
    ]
    server = grpc.aio.server(options=options)
    server.add_generic_rpc_handlers((ReplicaGrpc(app).handler(),))
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:  # grpc says "Failed to bind to address"
        raise OSError(f"gRPC port {address}: address already in use ({exc})") from None
    return server, port

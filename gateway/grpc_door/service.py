"""The V2 gRPC service's methods, each answering what its REST endpoint answers.

Health, metadata and the Triton extensions (repository index, model config, statistics) read
the same `gateway.control.runtime.Gateway` calls as REST's `gateway.api.admin` and turn the
same JSON documents into the messages (`google.protobuf.json_format`, unknown fields ignored:
a Triton replica's own config may say more than the message holds). ModelInfer is the edge's
(`gateway.grpc_door.infer`), which takes the message as received, and so is each request of
a ModelStreamInfer stream (`gateway.grpc_door.stream`). A `GatewayError` is
answered with its code from `gateway.grpc_door.status`; the gateway is read at each call, so
a reload takes over at once. With ``server.max_connections_per_peer`` set, every method is
under its cap (`gateway.grpc_door.peer_connections`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from gateway.errors import GatewayError
from gateway.grpc_door.door_app import DoorApp
from gateway.grpc_door.infer import InferDoor
from gateway.grpc_door.peer_connections import PeerConnections, capped, capped_stream
from gateway.grpc_door.receive import MessageReader
from gateway.grpc_door.status import code_of, error_metadata
from gateway.grpc_door.stream import StreamDoor
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import MODEL_INFER, SERVICE, Handler

log = logging.getLogger(__name__)
# bidirectional: not a `Method` (those are unary)
MODEL_STREAM_INFER = "ModelStreamInfer"
Context = grpc.aio.ServicerContext[Any, Any]
M = TypeVar("M", bound=Message)


def _serialize(response: Message) -> bytes:
    return response.SerializeToString()


def message(doc: dict[str, Any], into: M) -> M:
    """A REST JSON document as the gRPC message of the same fields."""
    return json_format.ParseDict(doc, into, ignore_unknown_fields=True)


class V2Service:
    """Every method of ``inference.GRPCInferenceService`` the gateway serves."""

    def __init__(
        self,
        app: DoorApp,
        reader: MessageReader,
        stream_answers: int,
        peers: PeerConnections | None = None,
    ) -> None:
        """``peers``: the cap on connections per client address (None: none)."""
        self._app = app
        self._infer = InferDoor(app, reader)
        self._stream = StreamDoor(self._infer, stream_answers)
        self.peers = peers

    def infer_handler(self) -> grpc.GenericRpcHandler:
        """ModelInfer and ModelStreamInfer, given each message as received: the door reads it
        itself (`v2proto.grpc.wire`), its raw contents as views of those bytes. ModelInfer is
        served as client-streaming (the same frames on the wire) so that the door asks for its
        message only when there is room for it (`gateway.grpc_door.receive`)."""
        # a coroutine function, as gRPC checks
        infer: Any = self._infer.__call__
        # an async generator: the answers as they complete
        streamed: Any = self._stream.__call__
        if self.peers is not None:
            infer = capped(infer, self.peers)
            streamed = capped_stream(streamed, self.peers)
        method: grpc.RpcMethodHandler[bytes, Message] = grpc.stream_unary_rpc_method_handler(
            infer, request_deserializer=None, response_serializer=_serialize
        )
        stream: grpc.RpcMethodHandler[bytes, Message] = grpc.stream_stream_rpc_method_handler(
            streamed, request_deserializer=None, response_serializer=_serialize
        )
        handlers = {MODEL_INFER.name: method, MODEL_STREAM_INFER: stream}
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def handlers(self) -> dict[str, Handler]:
        """The other methods by name, for `v2proto.grpc.service.generic_handler`."""
        methods: dict[str, Handler] = {
            "ServerLive": self._guarded(self.server_live),
            "ServerReady": self._guarded(self.server_ready),
            "ModelReady": self._guarded(self.model_ready),
            "ServerMetadata": self._guarded(self.server_metadata),
            "ModelMetadata": self._guarded(self.model_metadata),
            "RepositoryIndex": self._guarded(self.repository_index),
            "ModelConfig": self._guarded(self.model_config),
            "ModelStatistics": self._guarded(self.model_statistics),
        }
        peers = self.peers
        if peers is None:
            return methods
        return {name: capped(method, peers) for name, method in methods.items()}

    @staticmethod
    def _guarded(method: Callable[[Any], Awaitable[Message]]) -> Handler:
        """The method, with a `GatewayError` answered by its code, anything else INTERNAL."""

        async def call(request: Any, context: Context) -> Message:
            try:
                return await method(request)
            except GatewayError as error:
                context.set_trailing_metadata(error_metadata(error))
                await context.abort(code_of(error.status), error.message)
            except Exception:
                log.exception("unexpected error in a gRPC call")
                await context.abort(grpc.StatusCode.INTERNAL, "internal gateway error (logged)")
            raise AssertionError("abort returns only by raising")  # pragma: no cover

        return call

    async def server_live(self, request: pb.ServerLiveRequest) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: pb.ServerReadyRequest) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._app.gateway.ready())

    async def model_ready(self, request: pb.ModelReadyRequest) -> pb.ModelReadyResponse:
        gateway = self._app.gateway
        # NOT_FOUND
        model = gateway.model(request.name, request.version or None)
        return pb.ModelReadyResponse(ready=gateway.model_readiness(model).ready)

    async def server_metadata(self, request: pb.ServerMetadataRequest) -> pb.ServerMetadataResponse:
        return message(self._app.gateway.server_metadata(), pb.ServerMetadataResponse())

    async def model_metadata(self, request: pb.ModelMetadataRequest) -> pb.ModelMetadataResponse:
        gateway = self._app.gateway
        model = gateway.model(request.name, request.version or None)
        doc = await gateway.model_metadata(request.name, model)
        return message(doc, pb.ModelMetadataResponse())

    async def repository_index(
        self, request: pb.RepositoryIndexRequest
    ) -> pb.RepositoryIndexResponse:
        models = self._app.gateway.repository_index()
        if request.ready:
            models = [m for m in models if m["state"] == "READY"]
        return message({"models": models}, pb.RepositoryIndexResponse())

    async def model_config(self, request: pb.ModelConfigRequest) -> pb.ModelConfigResponse:
        gateway = self._app.gateway
        model = gateway.model(request.name, request.version or None)
        doc = await gateway.model_config(request.name, model)
        return message({"config": doc}, pb.ModelConfigResponse())

    async def model_statistics(
        self, request: pb.ModelStatisticsRequest
    ) -> pb.ModelStatisticsResponse:
        if request.name:
            self._app.gateway.model(request.name, request.version or None)
        doc = await self._app.statistics(request.name or None)
        return message(doc, pb.ModelStatisticsResponse())

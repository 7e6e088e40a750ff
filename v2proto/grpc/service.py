"""The V2 gRPC service ``inference.GRPCInferenceService``: its methods, a client stub, a server
handler.

Written by hand instead of generated (`*_pb2_grpc.py`) for two reasons: the messages' proto
package is ``v2proto.inference`` (so that they live beside tritonclient's own ``inference``
messages in one process: protobuf refuses a second definition of the same full name), while
the service keeps the name every V2 client and server calls, ``inference.GRPCInferenceService``
(only the method path goes on the wire, never a message's name); and the stub and handler are
typed for ``mypy --strict``, where generated gRPC glue is not.

The methods are the Open Inference Protocol's six (KServe, MLServer, Triton) and the Triton
extensions the REST side answers too: repository index, model config, statistics.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from v2proto.grpc import grpc_service_pb2 as pb

SERVICE = "inference.GRPCInferenceService"

Req = TypeVar("Req")
Resp = TypeVar("Resp")


@dataclass(frozen=True, slots=True)
class Method(Generic[Req, Resp]):
    """One unary RPC: its name and message classes."""

    name: str
    request: type[Req]
    response: type[Resp]

    @property
    def path(self) -> str:
        return f"/{SERVICE}/{self.name}"


SERVER_LIVE = Method("ServerLive", pb.ServerLiveRequest, pb.ServerLiveResponse)
SERVER_READY = Method("ServerReady", pb.ServerReadyRequest, pb.ServerReadyResponse)
MODEL_READY = Method("ModelReady", pb.ModelReadyRequest, pb.ModelReadyResponse)
SERVER_METADATA = Method("ServerMetadata", pb.ServerMetadataRequest, pb.ServerMetadataResponse)
MODEL_METADATA = Method("ModelMetadata", pb.ModelMetadataRequest, pb.ModelMetadataResponse)
MODEL_INFER = Method("ModelInfer", pb.ModelInferRequest, pb.ModelInferResponse)
REPOSITORY_INDEX = Method("RepositoryIndex", pb.RepositoryIndexRequest, pb.RepositoryIndexResponse)
MODEL_CONFIG = Method("ModelConfig", pb.ModelConfigRequest, pb.ModelConfigResponse)
MODEL_STATISTICS = Method("ModelStatistics", pb.ModelStatisticsRequest, pb.ModelStatisticsResponse)

METHODS: tuple[Method[Any, Any], ...] = (
    SERVER_LIVE,
    SERVER_READY,
    MODEL_READY,
    SERVER_METADATA,
    MODEL_METADATA,
    MODEL_INFER,
    REPOSITORY_INDEX,
    MODEL_CONFIG,
    MODEL_STATISTICS,
)


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _deserializer(cls: type[Resp]) -> Callable[[bytes], Resp]:
    parse: Callable[[bytes], Resp] = cls.FromString  # type: ignore[attr-defined]
    return parse


def _reply_deserializer(cls: type[Resp]) -> Callable[[bytes], Resp]:
    """A reply's parser: None for bytes that are not the message, as gRPC's own wrapper makes
    of any failure, but without the traceback it logs for each (a replica sending garbage is
    the caller's to judge, `gateway.upstream.transport.grpc_client`)."""
    parse = _deserializer(cls)

    def quiet(data: bytes) -> Resp:
        try:
            return parse(data)
        except DecodeError:
            return None  # type: ignore[return-value]  # gRPC's own "no message"

    return quiet


def unary(
    channel: grpc.aio.Channel, method: Method[Req, Resp]
) -> grpc.aio.UnaryUnaryMultiCallable[Req, Resp]:
    """A callable for ``method`` on ``channel`` (make it once per channel: it is reusable)."""
    return channel.unary_unary(
        method.path,
        request_serializer=_serialize,
        response_deserializer=_reply_deserializer(method.response),
    )


class Stub:
    """Every method of the service on one channel, made once."""

    __slots__ = (
        "model_config",
        "model_infer",
        "model_metadata",
        "model_ready",
        "model_statistics",
        "repository_index",
        "server_live",
        "server_metadata",
        "server_ready",
    )

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.server_live = unary(channel, SERVER_LIVE)
        self.server_ready = unary(channel, SERVER_READY)
        self.model_ready = unary(channel, MODEL_READY)
        self.server_metadata = unary(channel, SERVER_METADATA)
        self.model_metadata = unary(channel, MODEL_METADATA)
        self.model_infer = unary(channel, MODEL_INFER)
        self.repository_index = unary(channel, REPOSITORY_INDEX)
        self.model_config = unary(channel, MODEL_CONFIG)
        self.model_statistics = unary(channel, MODEL_STATISTICS)


Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


def generic_handler(handlers: Mapping[str, Handler]) -> grpc.GenericRpcHandler:
    """A server handler for the methods named in ``handlers`` (by `Method.name`); a method not
    named answers UNIMPLEMENTED, as gRPC does for any unknown method."""
    by_name = {m.name: m for m in METHODS}
    unknown = set(handlers) - set(by_name)
    if unknown:
        raise ValueError(f"not methods of {SERVICE}: {sorted(unknown)}")
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            name: grpc.unary_unary_rpc_method_handler(
                behavior,
                request_deserializer=_deserializer(by_name[name].request),
                response_serializer=_serialize,
            )
            for name, behavior in handlers.items()
        },
    )

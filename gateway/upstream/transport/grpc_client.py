"""`GrpcTransport`: the upstream `Transport` for replicas that speak the V2 gRPC protocol.

A pool's replica whose URL is ``grpc://host:port`` (``grpcs://`` with the pool's TLS) is reached
over ``inference.GRPCInferenceService`` instead of REST. The pipeline above does not know: it
sends the same REST request (method, V2 path, body) and gets a REST reply back, so retries,
hedging, votes, breakers, ejection and every answer check (the id echoed, outputs well-formed,
the reply's size) apply unchanged. This module maps each V2 REST path to its RPC and back:

    GET  /v2/health/live, /v2/health/ready        ServerLive, ServerReady (ready: 200, else 503)
    GET  /v2                                       ServerMetadata
    GET  /v2/models/{m}[/versions/{v}]             ModelMetadata
    GET  .../ready                                 ModelReady (the health probe)
    POST .../infer                                 ModelInfer (`v2proto.grpc.convert`)
    GET  .../config, .../stats; POST /v2/repository/index   Triton's ModelConfig,
                                                   ModelStatistics, RepositoryIndex

Errors are mapped once, here, into what the layers above already classify: UNAVAILABLE and
CANCELLED (no connection, a replica going away) raise `UpstreamConnectError` (or
`LocalResourceError` where the gateway itself lacked file descriptors or memory: `local_errors`),
DEADLINE_EXCEEDED (the try's timeout is the call's deadline) `UpstreamTimeout`, a reply over the
cap or one that is not the method's message (gRPC's deserializer gives None)
`UpstreamProtocolError`, as garbage from a REST replica is; any other status becomes the HTTP
status of the same meaning with a JSON ``{"error": ...}`` body: INTERNAL a 500 (disputed by
the fault judge, as a REST 500), INVALID_ARGUMENT a 400, NOT_FOUND a 404, UNIMPLEMENTED a 501,
and so on (`HTTP_STATUS`). gRPC's own details name the peer's address ("ipv4:10.0.0.7:8001");
the attempt's outcome names the replica by id, so an address is cut from every message here
(`scrubbed`).

The server metadata's extensions pass through as the server lists them, and a server that
lists ``binary_tensor_data`` (ours, Triton) is sent raw contents for every request, JSON ones
too (typed contents of a large tensor cost milliseconds to build and to read in Python); any
other gets typed contents for JSON (KServe 0.21's gRPC server fails every raw-contents
request) and the binary data the gateway sends it only where its pool says ``binary_tensors``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import grpc
import grpc.aio
import orjson
from google.protobuf.json_format import MessageToDict

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.upstream.transport.grpc_channels import Channel, open_channel
from gateway.upstream.transport.limits import MAX_REPLY_BODY_BYTES
from gateway.upstream.transport.local_errors import local_error_in
from v2proto.codec import HEADER_LENGTH
from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.convert import grpc_to_rest_response, rest_to_grpc_request

JSON_HEADERS = {"content-type": "application/json"}

HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.DATA_LOSS: 500,
}
BINARY_EXTENSION = "binary_tensor_data"
_CONNECT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
# An address in gRPC's details: a resolved peer (ipv4:/ipv6:/unix:...), or a bare IP[:port].
_ADDRESS = re.compile(
    r"(?:ipv4|ipv6|unix|unix-abstract|dns|vsock):\S+"
    r"|\[[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\](?::\d+)?"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
)
# Request headers that frame the REST exchange: they do not become call metadata.
_NOT_METADATA = frozenset(
    {
        "host",
        "content-type",
        "content-length",
        "connection",
        "transfer-encoding",
        "te",
        HEADER_LENGTH,
    }
)


def json_reply(doc: object, status: int = 200) -> Reply:
    return Reply(status, JSON_HEADERS, orjson.dumps(doc))


def error_reply(status: int, message: str) -> Reply:
    return json_reply({"error": message}, status)


def scrubbed(details: str) -> str:
    """``details`` without the addresses in it."""
    return _ADDRESS.sub("<address>", details)


def rpc_error(exc: grpc.aio.AioRpcError) -> Reply:
    """A failed call as the transport contract says: raised, or a reply with an error status."""
    code, details = exc.code(), scrubbed(exc.details() or exc.code().name)
    local = local_error_in(details) if code == grpc.StatusCode.UNAVAILABLE else None
    if local is not None:
        # grpc's core could not open a socket: the gateway's own shortage
        raise local from None
    if code in _CONNECT_CODES:
        raise UpstreamConnectError(f"gRPC {code.name}: {details}") from None
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        raise UpstreamTimeout("gRPC deadline exceeded") from None
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
        raise UpstreamProtocolError(f"reply over the size cap: {details}") from None
    return error_reply(HTTP_STATUS.get(code, 500), details)


class Joinable(Protocol):
    """A body kept in pieces (`gateway.v2.body.Body`): the conversion needs one buffer."""

    def joined(self) -> bytes: ...


class GrpcTransport:
    """V2 REST exchanges carried as V2 gRPC calls, over one channel per replica."""

    name = "grpc"

    def __init__(self, *, max_reply_body_bytes: int = MAX_REPLY_BODY_BYTES) -> None:
        self._max_reply = max_reply_body_bytes
        self._channels: dict[Endpoint, Channel] = {}
        # their ServerMetadata lists binary_tensor_data
        self._takes_raw: set[Endpoint] = set()
        self._closed = False

    def _channel(self, endpoint: Endpoint) -> Channel:
        channel = self._channels.get(endpoint)
        if channel is None:
            if self._closed:
                raise UpstreamConnectError("transport is closed")
            channel = self._channels[endpoint] = open_channel(endpoint, self._max_reply)
        return channel

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes | Joinable = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Reply:
        # grpc reads a reply whole (``room`` unheeded): the edge counts the answer once it has it
        channel = self._channel(endpoint)
        metadata = channel.metadata
        if headers:
            metadata += tuple((k, v) for k, v in headers.items() if k not in _NOT_METADATA)
        call = _Call(channel, metadata, timeout, endpoint in self._takes_raw)
        try:
            data = body if isinstance(body, bytes) else body.joined()
            reply = await _route(call, method, path, data, headers or {})
        except grpc.aio.AioRpcError as exc:
            return rpc_error(exc)
        if call.learned is not None:
            if call.learned:
                self._takes_raw.add(endpoint)
            else:
                self._takes_raw.discard(endpoint)
        return reply

    def forget(self, endpoint: Endpoint) -> None:
        self._takes_raw.discard(endpoint)
        channel = self._channels.pop(endpoint, None)
        if channel is not None:
            # calls in flight on it finish within the grace
            task = asyncio.get_running_loop().create_task(channel.channel.close(grace=5.0))
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)

    async def aclose(self) -> None:
        self._closed = True
        channels, self._channels = list(self._channels.values()), {}
        await asyncio.gather(*(c.channel.close() for c in channels), return_exceptions=True)


_CLOSING: set[asyncio.Task[None]] = set()


class _Call:
    """What every RPC of one exchange takes: the stub, metadata, the try's deadline, whether
    the server takes raw contents; ``learned``: what its server metadata said about that."""

    __slots__ = ("channel", "learned", "metadata", "raw", "timeout")

    def __init__(
        self, channel: Channel, metadata: tuple[tuple[str, str], ...], timeout: float, raw: bool
    ) -> None:
        self.channel, self.metadata, self.timeout, self.raw = channel, metadata, timeout, raw
        self.learned: bool | None = None

    async def __call__(self, method: Any, message: Any) -> Any:
        """The RPC's reply; a caller that stops waiting (its client left, a vote leg past its
        quorum, a hedge that lost) cancels the RPC in gRPC's core (`cancel_in_core`): the
        replica sees the cancellation at once and stops.

        Not with ``call.cancel()``, which also cancels the task awaiting the call's batch:
        grpc.aio frees a batch's native operations only when that task sees the batch's
        result, so every call cancelled so leaked them (grpc/grpc issue 43360). Cancelled in
        the core, the batch ends at once with the status CANCELLED and its task sees it; the
        call is held in ``_UNFINISHED`` until then.
        """
        call = method(message, timeout=self.timeout, metadata=self.metadata)
        rpc = asyncio.ensure_future(call)
        try:
            reply = await asyncio.shield(rpc)
        except asyncio.CancelledError:
            if not rpc.done():
                cancel_in_core(call)
                _UNFINISHED.add(rpc)
                rpc.add_done_callback(_ended)
            raise
        if reply is None:
            # what gRPC makes of a reply its deserializer cannot read
            raise UpstreamProtocolError("the replica's gRPC reply is not a valid message")
        return reply


# bounded: calls cancelled, until their batch ends
_UNFINISHED: set[asyncio.Future[Any]] = set()
CANCELLED_DETAILS = "the gateway no longer waits for this call"


def cancel_in_core(call: object) -> None:
    """Cancels a grpc.aio call in gRPC's core only (``grpc_call_cancel_with_status``), leaving
    the task that awaits its batch to see it end; ``call.cancel()`` would cancel that task too.
    grpc.aio offers no public way to do only this, so its call's core object is reached by
    name; anything without one (a test's stand-in) is left alone."""
    core = getattr(call, "_cython_call", None)
    if core is not None and not core.done():
        core.cancel(CANCELLED_DETAILS)


def _ended(rpc: asyncio.Future[Any]) -> None:
    _UNFINISHED.discard(rpc)
    if not rpc.cancelled():
        # retrieved: an RPC nobody waits for failing is no news
        rpc.exception()


async def _route(
    call: _Call, method: str, path: str, body: bytes, headers: Mapping[str, str]
) -> Reply:
    """A REST request to a replica, carried as the gRPC call that means the same."""
    server = _SERVER_ROUTES.get((method, path))
    if server is not None:
        return await server(call)
    model = _model_route(path)
    if model is None:
        return error_reply(404, f"no route for {path} over gRPC")
    name, version, action = model
    if action == "infer" and method == "POST":
        return await _infer(call, name, version, body, headers)
    if method not in ("GET", "HEAD"):
        return error_reply(405, f"method {method} not allowed here")
    read = _MODEL_READS.get(action)
    if read is None:
        return error_reply(404, f"no route for {path} over gRPC")
    return await read(call, name, version)


async def _server_live(call: _Call) -> Reply:
    live = (await call(call.channel.stub.server_live, pb.ServerLiveRequest())).live
    return json_reply({"live": live}, 200 if live else 503)


async def _server_ready(call: _Call) -> Reply:
    ready = (await call(call.channel.stub.server_ready, pb.ServerReadyRequest())).ready
    return json_reply({"ready": ready}, 200 if ready else 503)


async def _server_metadata(call: _Call) -> Reply:
    meta = await call(call.channel.stub.server_metadata, pb.ServerMetadataRequest())
    extensions = list(meta.extensions)
    call.learned = BINARY_EXTENSION in extensions
    return json_reply({"name": meta.name, "version": meta.version, "extensions": extensions})


async def _repository_index(call: _Call) -> Reply:
    index = await call(call.channel.stub.repository_index, pb.RepositoryIndexRequest())
    rows = [
        {"name": m.name, "version": m.version, "state": m.state, "reason": m.reason}
        for m in index.models
    ]
    return json_reply(rows)


async def _model_ready(call: _Call, name: str, version: str) -> Reply:
    request = pb.ModelReadyRequest(name=name, version=version)
    if (await call(call.channel.stub.model_ready, request)).ready:
        return json_reply({"name": name, "ready": True})
    return json_reply({"name": name, "ready": False, "error": "model not ready"}, 503)


async def _model_metadata_reply(call: _Call, name: str, version: str) -> Reply:
    request = pb.ModelMetadataRequest(name=name, version=version)
    return json_reply(_model_metadata(await call(call.channel.stub.model_metadata, request)))


async def _model_config(call: _Call, name: str, version: str) -> Reply:
    request = pb.ModelConfigRequest(name=name, version=version)
    config = await call(call.channel.stub.model_config, request)
    return json_reply(MessageToDict(config.config, preserving_proto_field_name=True))


async def _model_stats(call: _Call, name: str, version: str) -> Reply:
    request = pb.ModelStatisticsRequest(name=name, version=version)
    stats = await call(call.channel.stub.model_statistics, request)
    return json_reply(MessageToDict(stats, preserving_proto_field_name=True))


# (method, path) of the server's own reads -> the call that answers it
_SERVER_ROUTES: dict[tuple[str, str], Callable[[_Call], Awaitable[Reply]]] = {
    ("GET", "/v2/health/live"): _server_live,
    ("HEAD", "/v2/health/live"): _server_live,
    ("GET", "/v2/health/ready"): _server_ready,
    ("HEAD", "/v2/health/ready"): _server_ready,
    ("GET", "/v2"): _server_metadata,
    ("GET", "/v2/"): _server_metadata,
    ("POST", "/v2/repository/index"): _repository_index,
}
# a model path's action (GET or HEAD) -> the call that answers it; "" is the model's metadata
_MODEL_READS: dict[str, Callable[[_Call, str, str], Awaitable[Reply]]] = {
    "ready": _model_ready,
    "": _model_metadata_reply,
    "config": _model_config,
    "stats": _model_stats,
}


def _model_route(path: str) -> tuple[str, str, str] | None:
    """``(model, version or "", action)`` of a ``/v2/models/...`` path, or None."""
    parts = path.split("/")
    if len(parts) < 4 or parts[:3] != ["", "v2", "models"] or not parts[3]:
        return None
    name, rest, version = parts[3], parts[4:], ""
    if len(rest) >= 2 and rest[0] == "versions":
        version, rest = rest[1], rest[2:]
    if len(rest) > 1:
        return None
    action = rest[0] if rest else ""
    if action not in ("", "ready", "infer", "config", "stats"):
        return None
    return name, version, action


def _model_metadata(meta: pb.ModelMetadataResponse) -> dict[str, Any]:
    def tensors(entries: Any) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in entries]

    return {
        "name": meta.name,
        "versions": list(meta.versions),
        "platform": meta.platform,
        "inputs": tensors(meta.inputs),
        "outputs": tensors(meta.outputs),
    }


async def _infer(
    call: _Call, name: str, version: str, body: bytes, headers: Mapping[str, str]
) -> Reply:
    try:
        message, forms = rest_to_grpc_request(
            body, headers.get(HEADER_LENGTH), model_name=name, model_version=version, raw=call.raw
        )
    except ProtocolError as exc:
        # what gRPC cannot carry: the request's fault, as a 400
        return error_reply(400, f"cannot send this request over gRPC: {exc.message}")
    reply = await call(call.channel.stub.model_infer, message)
    try:
        encoded = grpc_to_rest_response(reply, forms)
    except ProtocolError as exc:
        raise UpstreamProtocolError(f"malformed gRPC reply: {exc.message}") from None
    return Reply(200, encoded.headers(), encoded.body)

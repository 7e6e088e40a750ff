"""GrpcTransport against a real grpc.aio server in-process: REST exchanges carried as V2 gRPC
calls, replies converted back, and every gRPC failure mapped once into the transport contract."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
import numpy as np
import orjson
import pytest

from gateway.config.endpoint import Endpoint
from gateway.config.headers import ExtraHeaders
from gateway.errors import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from gateway.upstream.transport import grpc_client
from gateway.upstream.transport.dispatch import ProtocolTransport
from gateway.upstream.transport.grpc_client import GrpcTransport, scrubbed
from gateway.upstream.transport.http1 import Http1Transport
from tests.support.processes import free_port
from v2proto.codec import HEADER_LENGTH, decode_infer_response, encode_infer_request
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import generic_handler

WAIT_S = 10.0  # the bound on a wait for what the server saw: generous, for a busy machine


class Scripted:
    """A V2 gRPC server whose answers the test sets."""

    def __init__(self) -> None:
        self.ready = True
        self.abort: tuple[grpc.StatusCode, str] | None = None
        self.hang = asyncio.Event()
        self.hanging = False
        self.reply_id: str | None = None
        self.reply_bytes = 0
        self.seen: list[pb.ModelInferRequest] = []
        self.metadata: list[dict[str, str]] = []
        self.extensions = ["x"]
        self.garbage = False  # ModelInfer answers bytes that are not a ModelInferResponse
        self.cancelled = 0  # ModelInfer calls its client cancelled while they hung

    def handler(self) -> grpc.GenericRpcHandler:
        return generic_handler(
            {
                "ServerReady": self.server_ready,
                "ModelReady": self.model_ready,
                "ServerMetadata": self.server_metadata,
                "ModelMetadata": self.model_metadata,
                "ModelInfer": self.model_infer,
            }
        )

    async def server_ready(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=self.ready)

    async def model_ready(self, request: Any, context: Any) -> Any:
        if request.name != "m":
            await context.abort(grpc.StatusCode.NOT_FOUND, f"model '{request.name}' not found")
        return pb.ModelReadyResponse(ready=self.ready)

    async def server_metadata(self, request: Any, context: Any) -> Any:
        return pb.ServerMetadataResponse(name="scripted", version="1", extensions=self.extensions)

    async def model_metadata(self, request: Any, context: Any) -> Any:
        reply = pb.ModelMetadataResponse(name="m", versions=["1"], platform="p")
        reply.inputs.add(name="x", datatype="FP32", shape=[-1, 2])
        return reply

    async def model_infer(self, request: Any, context: Any) -> Any:
        self.seen.append(request)
        self.metadata.append({k: v for k, v in context.invocation_metadata()})
        if self.hanging:
            try:
                await self.hang.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.abort is not None:
            await context.abort(*self.abort)
        if self.garbage:
            return Garbage()
        reply = pb.ModelInferResponse(
            model_name=request.model_name,
            model_version="1",
            id=request.id if self.reply_id is None else self.reply_id,
        )
        for entry in request.inputs:
            out = reply.outputs.add(name="y", datatype=entry.datatype, shape=entry.shape)
            out.contents.CopyFrom(entry.contents)
        reply.raw_output_contents.extend(request.raw_input_contents)
        if self.reply_bytes:
            reply.parameters["pad"].string_param = "x" * self.reply_bytes
        return reply


class Garbage:
    """What a replica sending non-protobuf bytes as its reply sends (a truncated varint)."""

    def SerializeToString(self) -> bytes:  # the message method gRPC calls
        return b"\x0a\xff\xff\xff\xff not protobuf"


@pytest.fixture
async def server() -> AsyncIterator[tuple[Scripted, Endpoint]]:
    scripted = Scripted()
    srv = grpc.aio.server()
    srv.add_generic_rpc_handlers((scripted.handler(),))
    port = srv.add_insecure_port("127.0.0.1:0")
    await srv.start()
    try:
        yield scripted, Endpoint.parse(f"grpc://127.0.0.1:{port}")
    finally:
        scripted.hang.set()
        await srv.stop(None)


@pytest.fixture
async def transport() -> AsyncIterator[GrpcTransport]:
    transport = GrpcTransport(max_reply_body_bytes=1 << 20)
    yield transport
    await transport.aclose()


X = np.arange(6, dtype=np.float32).reshape(3, 2)


@pytest.mark.parametrize("binary", [False, True])
async def test_infer_round_trip_in_the_clients_form(
    server: Any, transport: GrpcTransport, binary: bool
) -> None:
    scripted, endpoint = server
    sent = encode_infer_request(
        {"x": X}, ["y"], binary_inputs=binary, binary_outputs=binary, request_id="r1"
    )
    reply = await transport.request(
        endpoint,
        "POST",
        "/v2/models/m/versions/1/infer",
        body=sent.body,
        headers={**sent.headers(), "traceparent": "00-abc-def-01"},
        timeout=5,
    )
    assert reply.status == 200
    assert (HEADER_LENGTH in reply.headers) is binary
    decoded = decode_infer_response(reply.body, reply.headers.get(HEADER_LENGTH))
    assert decoded.id == "r1" and np.array_equal(decoded.outputs["y"], X)
    request = scripted.seen[-1]
    assert (request.model_name, request.model_version, request.id) == ("m", "1", "r1")
    assert bool(request.raw_input_contents) is binary
    assert scripted.metadata[-1]["traceparent"] == "00-abc-def-01"
    assert "content-type" not in scripted.metadata[-1]


async def test_health_and_metadata_paths(server: Any, transport: GrpcTransport) -> None:
    scripted, endpoint = server

    async def get(path: str) -> tuple[int, Any]:
        reply = await transport.request(endpoint, "GET", path, timeout=5)
        return reply.status, orjson.loads(reply.body)

    assert await get("/v2/models/m/ready") == (200, {"name": "m", "ready": True})
    assert await get("/v2/health/ready") == (200, {"ready": True})
    scripted.ready = False
    assert (await get("/v2/models/m/ready"))[0] == 503
    assert await get("/v2/health/ready") == (503, {"ready": False})
    assert await get("/v2/models/other/ready") == (404, {"error": "model 'other' not found"})
    status, meta = await get("/v2")
    assert meta["extensions"] == ["x"]  # as the server lists them
    status, meta = await get("/v2/models/m")
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}]
    status, _ = await get("/v2/models/m/stats")  # not served by this server
    assert status == 501


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (grpc.StatusCode.INTERNAL, 500),
        (grpc.StatusCode.INVALID_ARGUMENT, 400),
        (grpc.StatusCode.NOT_FOUND, 404),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
    ],
)
async def test_error_statuses_become_the_http_status_of_the_same_meaning(
    server: Any, transport: GrpcTransport, code: grpc.StatusCode, status: int
) -> None:
    scripted, endpoint = server
    scripted.abort = (code, "what went wrong")
    sent = encode_infer_request({"x": X})
    reply = await transport.request(
        endpoint, "POST", "/v2/models/m/infer", body=sent.body, timeout=5
    )
    assert (reply.status, orjson.loads(reply.body)) == (status, {"error": "what went wrong"})


async def test_unavailable_is_a_connect_error(server: Any, transport: GrpcTransport) -> None:
    scripted, _ = server
    scripted.abort = (grpc.StatusCode.UNAVAILABLE, "draining")
    with pytest.raises(UpstreamConnectError, match="UNAVAILABLE: draining"):
        await transport.request(
            server[1],
            "POST",
            "/v2/models/m/infer",
            body=encode_infer_request({"x": X}).body,
            timeout=5,
        )
    nobody = Endpoint.parse(f"grpc://127.0.0.1:{free_port()}")
    with pytest.raises(UpstreamConnectError) as raised:
        await transport.request(nobody, "GET", "/v2/health/ready", timeout=5)
    assert "127.0.0.1" not in raised.value.message  # replicas are named by id, above


def test_addresses_are_cut_from_grpc_details() -> None:
    details = (
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:27399: "
        "Failed to connect to remote host: Connection refused; peer 10.0.0.7:8001, "
        "[fd00::1]:9000, ipv6:[::1]:5"
    )
    cut = scrubbed(details)
    for address in ("127.0.0.1", "27399", "10.0.0.7", "fd00", "::1"):
        assert address not in cut
    assert cut.startswith("failed to connect to all addresses") and "Connection refused" in cut


async def test_a_reply_that_does_not_decode_is_a_protocol_error(
    server: Any, transport: GrpcTransport
) -> None:
    scripted, endpoint = server
    scripted.garbage = True
    with pytest.raises(UpstreamProtocolError, match="not a valid message"):
        await transport.request(
            endpoint,
            "POST",
            "/v2/models/m/infer",
            body=encode_infer_request({"x": X}).body,
            timeout=5,
        )


async def test_the_try_timeout_is_the_calls_deadline(server: Any, transport: GrpcTransport) -> None:
    scripted, endpoint = server
    scripted.hanging = True
    with pytest.raises(UpstreamTimeout):
        await transport.request(
            endpoint,
            "POST",
            "/v2/models/m/infer",
            body=encode_infer_request({"x": X}).body,
            timeout=0.2,
        )


async def test_a_caller_that_stops_waiting_cancels_the_call_at_the_replica(
    server: Any, transport: GrpcTransport
) -> None:
    """A request whose client left: the replica's handler is cancelled at once, not left to
    run to the call's deadline; the call is held only until its batch has ended."""
    scripted, endpoint = server
    scripted.hanging = True
    body = encode_infer_request({"x": X}).body
    caller = asyncio.ensure_future(
        transport.request(endpoint, "POST", "/v2/models/m/infer", body=body, timeout=60)
    )
    await _until(lambda: bool(scripted.seen))
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    # the replica sees it far sooner than the call's 60 s, and the call is let go
    await _until(lambda: scripted.cancelled == 1 and not grpc_client._UNFINISHED)


async def _until(predicate: Callable[[], bool]) -> None:
    """Polls ``predicate`` every 10 ms; `TimeoutError` after `WAIT_S`."""
    for _ in range(int(WAIT_S / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise TimeoutError("condition not met in time")


async def test_a_reply_over_the_cap_is_a_protocol_error(
    server: Any, transport: GrpcTransport
) -> None:
    scripted, endpoint = server
    scripted.reply_bytes = 2 << 20  # the transport's cap is 1 MiB
    with pytest.raises(UpstreamProtocolError, match="size cap"):
        await transport.request(
            endpoint,
            "POST",
            "/v2/models/m/infer",
            body=encode_infer_request({"x": X}).body,
            timeout=5,
        )


async def test_a_reply_with_another_id_reaches_the_caller_to_refuse(
    server: Any, transport: GrpcTransport
) -> None:
    """The transport converts; the attempt layer checks the id (as for REST replies)."""
    scripted, endpoint = server
    scripted.reply_id = "someone-else"
    sent = encode_infer_request({"x": X}, request_id="mine")
    reply = await transport.request(
        endpoint, "POST", "/v2/models/m/infer", body=sent.body, timeout=5
    )
    assert orjson.loads(reply.body)["id"] == "someone-else"


async def test_one_channel_per_replica_kept_open(server: Any, transport: GrpcTransport) -> None:
    _, endpoint = server
    for _ in range(3):
        await transport.request(endpoint, "GET", "/v2/health/ready", timeout=5)
    assert len(transport._channels) == 1
    transport.forget(endpoint)
    assert not transport._channels


async def test_protocol_transport_sends_each_endpoint_its_protocol(server: Any) -> None:
    _, endpoint = server
    fast = Http1Transport()
    both = ProtocolTransport(fast, GrpcTransport)
    try:
        reply = await both.request(endpoint, "GET", "/v2/health/ready", timeout=5)
        assert reply.status == 200
        http = Endpoint.parse(f"http://127.0.0.1:{free_port()}")
        with pytest.raises(UpstreamConnectError, match="cannot connect"):  # Http1Transport's words
            await both.request(http, "GET", "/v2/health/ready", timeout=1)
    finally:
        await both.aclose()


def test_grpc_urls() -> None:
    assert Endpoint.parse("grpc://h:9").is_grpc and Endpoint.parse("grpc://h").port == 8001
    assert Endpoint.parse("grpcs://h:9").tls is not None
    assert not Endpoint.parse("http://h:9").is_grpc
    with pytest.raises(ValueError, match="has no path"):
        Endpoint.parse("grpc://h:9/prefix")


async def test_pool_headers_go_as_metadata(server: Any, transport: GrpcTransport) -> None:
    scripted, endpoint = server
    headers = ExtraHeaders(None, "authorization: Bearer k\r\nx-team: a\r\n", 2, ())
    with_headers = endpoint.with_pool(None, headers)
    await transport.request(
        with_headers,
        "POST",
        "/v2/models/m/infer",
        body=encode_infer_request({"x": X}).body,
        timeout=5,
    )
    assert scripted.metadata[-1]["authorization"] == "Bearer k"
    assert scripted.metadata[-1]["x-team"] == "a"


async def test_a_server_listing_binary_tensor_data_gets_raw_contents_for_json_too(
    server: Any, transport: GrpcTransport
) -> None:
    scripted, endpoint = server
    sent = encode_infer_request({"x": X}, request_id="j")

    async def infer() -> Any:
        reply = await transport.request(
            endpoint, "POST", "/v2/models/m/infer", body=sent.body, timeout=5
        )
        assert orjson.loads(reply.body)["outputs"][0]["data"] == X.ravel().tolist()  # JSON back
        return scripted.seen[-1]

    assert not (await infer()).raw_input_contents  # not known yet: typed
    scripted.extensions = ["binary_tensor_data"]
    await transport.request(endpoint, "GET", "/v2", timeout=5)  # the extensions learner's call
    assert list((await infer()).raw_input_contents) == [X.tobytes()]
    scripted.extensions = []
    await transport.request(endpoint, "GET", "/v2", timeout=5)
    assert not (await infer()).raw_input_contents

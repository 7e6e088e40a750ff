"""The gRPC door's ModelInfer on fakes (`gateway.grpc_door.infer.InferDoor`): what it hands
the edge, what it answers for a result, a refusal, a bug and a cancelled call, and that every
call is reported to the edge exactly once with the status a REST client would have seen."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import grpc
import orjson
import pytest

from gateway.call import InferAnswer
from gateway.errors import TooManyRequests
from gateway.grpc_door.infer import InferDoor
from gateway.grpc_door.receive import MessageReader
from gateway.grpc_door.service import V2Service
from gateway.memory.inflight_bytes import InflightBytes
from tests.support.processes import wait_until_async
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import SERVICE, Stub

Reader = Callable[[], Awaitable[tuple[bytes | memoryview, bool]]]


class Aborted(Exception):
    pass


@dataclass
class FakeContext:
    metadata: tuple[tuple[str, str], ...] = ()
    remaining: float | None = None
    trailing: tuple[tuple[str, str], ...] = ()
    aborted: tuple[grpc.StatusCode, str] | None = None
    messages: list[bytes] = field(default_factory=list)  # what the client sends, in order
    done_callbacks: list[Callable[[Any], None]] = field(default_factory=list)

    async def read(self) -> Any:
        return self.messages.pop(0) if self.messages else grpc.aio.EOF

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.done_callbacks.append(callback)

    def time_remaining(self) -> float | None:
        return self.remaining

    def set_trailing_metadata(self, metadata: tuple[tuple[str, str], ...]) -> None:
        self.trailing = metadata

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted


@dataclass
class FakeEdge:
    """Reads the body as the edge does, then answers with ``answer``."""

    answer: Callable[[dict[str, str], list[bytes | memoryview]], InferAnswer]
    done_calls: list[tuple[Any, ...]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    pieces: list[bytes | memoryview] = field(default_factory=list)
    unwritten: bool = False  # done with its answer not yet written
    peer: str = ""  # the address the last request arrived from

    def arrive(self, model: str, version: str | None, headers: dict[str, str], peer: str) -> Any:
        self.headers, self.peer = headers, peer
        span = SimpleNamespace(traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01")
        return SimpleNamespace(request_id="req-1", span=span, attempts=2)

    async def infer(self, arrival: Any, read: Reader) -> InferAnswer:
        while True:
            chunk, more = await read()
            self.pieces.append(chunk)
            if not more:
                return self.answer(self.headers, self.pieces)

    def done(
        self,
        arrival: Any,
        status: int,
        served_by: str = "",
        degraded: str | None = None,
        sent: int = -1,
        written: bool = True,
    ) -> None:
        self.done_calls.append((status, served_by, degraded, sent))
        self.unwritten = not written

    def written(self, arrival: Any) -> None:
        self.unwritten = False


def raw_request() -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="digits")
    request.inputs.add(name="input", datatype="FP32", shape=[1, 2])
    request.raw_input_contents.append(b"\0\0\x80?\0\0\0@")  # 1.0, 2.0
    return request


def reply(vote: str | None = None) -> InferAnswer:
    head = orjson.dumps(
        {
            "model_name": "digits",
            "outputs": [
                {
                    "name": "label",
                    "datatype": "INT64",
                    "shape": [1],
                    "parameters": {"binary_data_size": 8},
                }
            ],
        }
    )
    return InferAnswer(
        200,
        head + (3).to_bytes(8, "little"),
        "application/octet-stream",
        str(len(head)),
        "r0",
        1,
        None,
        vote,
    )


def door(edge: FakeEdge) -> Callable[[bytes, FakeContext], Awaitable[Any]]:
    """The door's ModelInfer, called by a client that sends ``data`` as its one message."""
    reader = MessageReader(InflightBytes(64 << 20, 0.0), 16 << 20, 5.0)
    infer = InferDoor(SimpleNamespace(edge=edge), reader)

    async def call(data: bytes, context: FakeContext) -> Any:
        context.messages.append(data)
        return await infer(None, context)  # type: ignore[arg-type]

    return call


async def test_the_edge_gets_the_metadata_the_deadline_and_the_tensors_as_pieces() -> None:
    edge = FakeEdge(lambda headers, pieces: reply("3/3"))
    context = FakeContext((("x-api-key", "k"), ("user-agent", "x")), remaining=0.25)
    response = await door(edge)(raw_request().SerializeToString(), context)
    assert edge.headers["x-api-key"] == "k" and "user-agent" not in edge.headers
    assert edge.peer == "ipv4:127.0.0.1:50000"  # the call's address, for the in-flight bytes
    assert edge.headers["x-request-timeout-ms"] == "250.000"
    head, tensor = edge.pieces
    assert tensor == b"\0\0\x80?\0\0\0@" and edge.headers["inference-header-content-length"] == (
        str(len(head))
    )
    assert orjson.loads(head)["inputs"][0]["parameters"] == {"binary_data_size": 8}
    assert list(response.raw_output_contents) == [(3).to_bytes(8, "little")]
    trailing = dict(context.trailing)
    assert trailing["x-vote"] == "3/3" and trailing["x-served-by"] == "r0"
    assert trailing["x-request-id"] == "req-1" and trailing["traceparent"].startswith("00-")
    assert edge.done_calls == [(200, "r0", None, len(reply().body))]
    assert edge.unwritten  # the answer's bytes stay held until grpc has taken the response
    (written,) = context.done_callbacks
    written(context)
    assert not edge.unwritten


async def test_a_large_messages_tensor_reaches_the_edge_as_a_view_of_it() -> None:
    request = pb.ModelInferRequest(model_name="digits")
    request.inputs.add(name="input", datatype="FP32", shape=[400, 64])
    request.raw_input_contents.append(b"\0" * (400 * 64 * 4))  # 100 KB
    data = request.SerializeToString()
    edge = FakeEdge(lambda headers, pieces: reply())
    await door(edge)(data, FakeContext())
    tensor = edge.pieces[1]
    assert isinstance(tensor, memoryview) and tensor.obj is data and len(tensor) == 102_400


async def test_a_refusal_is_its_code_with_retry_after_and_reported_once() -> None:
    def refuse(headers: dict[str, str], pieces: list[bytes | memoryview]) -> InferAnswer:
        raise TooManyRequests("tenant globex over its rate", 2.0)

    edge = FakeEdge(refuse)
    context = FakeContext()
    with pytest.raises(Aborted):
        await door(edge)(raw_request().SerializeToString(), context)
    assert context.aborted == (grpc.StatusCode.RESOURCE_EXHAUSTED, "tenant globex over its rate")
    trailing = dict(context.trailing)
    assert trailing["retry-after"] == "2" and trailing["x-http-status"] == "429"
    assert trailing["x-attempts"] == "2" and trailing["x-request-id"] == "req-1"
    assert edge.done_calls == [(429, "", None, -1)]


async def test_a_bad_message_is_invalid_argument_naming_the_field() -> None:
    edge = FakeEdge(lambda headers, pieces: reply())
    request = raw_request()
    request.raw_input_contents[0] = b"\0\0"
    context = FakeContext()
    with pytest.raises(Aborted):
        await door(edge)(request.SerializeToString(), context)
    assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert "input 'input'" in context.aborted[1]
    assert edge.done_calls == [(400, "", None, -1)]


async def test_bytes_that_are_not_a_message_are_invalid_argument_before_the_edge() -> None:
    edge = FakeEdge(lambda headers, pieces: reply())
    context = FakeContext()
    with pytest.raises(Aborted):
        await door(edge)(b"\x0a\xff\xff", context)
    assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert edge.done_calls == []


async def test_a_bug_is_internal_without_its_text() -> None:
    def bug(headers: dict[str, str], pieces: list[bytes | memoryview]) -> InferAnswer:
        raise KeyError("secret detail")

    edge = FakeEdge(bug)
    context = FakeContext()
    with pytest.raises(Aborted):
        await door(edge)(raw_request().SerializeToString(), context)
    assert context.aborted == (grpc.StatusCode.INTERNAL, "internal gateway error (logged)")
    assert edge.done_calls == [(500, "", None, -1)]


@pytest.mark.parametrize(
    ("remaining", "status"), [(-0.001, 504), (0.01, 504), (0.2, 499), (5.0, 499)]
)  # a cancellation within DEADLINE_SKEW_S of the deadline is the deadline's
async def test_a_cancelled_call_is_reported_as_its_deadline_or_the_client(
    remaining: float, status: int
) -> None:
    def cancelled(headers: dict[str, str], pieces: list[bytes | memoryview]) -> InferAnswer:
        raise asyncio.CancelledError

    edge = FakeEdge(cancelled)
    with pytest.raises(asyncio.CancelledError):
        await door(edge)(raw_request().SerializeToString(), FakeContext(remaining=remaining))
    assert edge.done_calls == [(status, "", None, -1)]


async def test_a_non_2xx_result_is_internal() -> None:
    edge = FakeEdge(lambda headers, pieces: InferAnswer(502, b"", None, None, "r0", 1))
    context = FakeContext()
    with pytest.raises(Aborted):
        await door(edge)(raw_request().SerializeToString(), context)
    assert context.aborted is not None and context.aborted[0] == grpc.StatusCode.INTERNAL
    assert edge.done_calls == [(500, "", None, -1)]


async def test_grpc_calls_back_once_it_has_taken_the_response_and_the_bytes_go_back() -> None:
    """A real grpc server: the answer's bytes stay held after `done` until grpc's done
    callback says the call has ended, for the unary call and for each answer of a stream."""
    edge = FakeEdge(lambda headers, pieces: reply())
    reader = MessageReader(InflightBytes(64 << 20, 0.0), 16 << 20, 5.0)
    service = V2Service(SimpleNamespace(edge=edge), reader, 4)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((service.infer_handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await Stub(channel).model_infer(raw_request(), timeout=10)
            await wait_until_async(lambda: not edge.unwritten, 5.0, message="the unary's written")
            stream = channel.stream_stream(
                f"/{SERVICE}/ModelStreamInfer",
                request_serializer=pb.ModelInferRequest.SerializeToString,
                response_deserializer=pb.ModelStreamInferResponse.FromString,
            )
            call = stream(iter([raw_request()]), timeout=10)
            async for answer in call:
                assert not answer.error_message
            await wait_until_async(lambda: not edge.unwritten, 5.0, message="the stream's written")
        assert len(edge.done_calls) == 2
    finally:
        await server.stop(None)

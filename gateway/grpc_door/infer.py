"""gRPC's front door for ``ModelInfer``: the message in, the same edge as REST, the message out.

Everything a request goes through is the edge's (`gateway.pipeline.edge`, composed in
`gateway.pipeline.build.build_edge`), exactly as for REST's `gateway.api.infer`; this door only
translates. The metadata the edge reads (``x-request-id``, ``traceparent``, the tenant's key as
``authorization: Bearer <key>`` or ``x-api-key``) become its headers, and the gRPC deadline
(``grpc-timeout``) its ``x-request-timeout-ms``, capped by the model as REST's is. The message
becomes a REST body (`v2proto.grpc.convert`) when the edge reads the body, after the tenant,
model and tenant limits have passed: its JSON header is the body's first piece, and each raw
content is a piece of its own after it (`gateway.v2.body.Body`; in a large message a view of
the received bytes, `v2proto.grpc.wire`: the tensor bytes are neither copied nor joined on
their way to a REST replica; typed contents are made raw first,
`gateway.grpc_door.typed`); the binary extension's header length is added to the headers the
edge reads next. Outputs are
asked for as binary data, and answered as ``raw_output_contents``, as Triton answers.

The answer's trailing metadata says what REST's headers say: ``x-served-by``, ``x-attempts``,
``x-request-id``, ``traceparent``, and for a fallback or vote answer ``x-degraded`` / ``x-vote``
(the response's V2 ``parameters`` carry ``degraded`` / ``vote`` too). Trailing, as an error's
must be, so that a client reads every answer's in one place, and because initial metadata sent
apart from the message costs the call one more write. An error is answered with its code
(`gateway.grpc_door.status`), its message, and the same metadata. A call the client cancels (or
whose connection drops), or whose deadline gRPC ends first, is recorded as 499
(`CLIENT_CLOSED`) or 504; grpc.aio cancels the call's task, so everything the request started
stops with it (`gateway.cancel`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from gateway.api.tenants import HEADERS as TENANT_HEADERS
from gateway.call import InferAnswer
from gateway.deadline import TIMEOUT_HEADER
from gateway.errors import CLIENT_CLOSED, BadRequest, GatewayError
from gateway.grpc_door.door_app import DoorApp
from gateway.grpc_door.receive import CallRefused, MessageReader, missing_request
from gateway.grpc_door.status import code_of, error_metadata
from gateway.grpc_door.typed import typed_to_raw
from gateway.memory.inflight_bytes import Hold
from gateway.pipeline.edge import Arrival, Edge
from gateway.pipeline.edge_steps import BodyReader
from gateway.v2.request import HEADER_LENGTH
from v2proto.errors import ProtocolError
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.contents import Raw
from v2proto.grpc.convert import grpc_to_rest_parts, rest_to_grpc_response
from v2proto.grpc.wire import read_infer_request

log = logging.getLogger(__name__)
Context = grpc.aio.ServicerContext[Any, Any]
# What the edge reads from metadata (a client's ``x-request-timeout-ms`` too, under a deadline).
_WANTED = frozenset(("x-request-id", "traceparent", "tracestate", TIMEOUT_HEADER, *TENANT_HEADERS))
# A client cancels at its own deadline, which this side's lies just after (it counts from the
# call's arrival): a cancellation this close to the deadline is the deadline's (504), not 499.
DEADLINE_SKEW_S = 0.05


@dataclass(frozen=True, slots=True)
class GrpcAnswer:
    """One ModelInfer request's outcome, for the unary call or a stream to send: the response,
    or the code and message to refuse it with; the metadata REST's headers would carry."""

    # pb.ModelInferResponse, or None when refused
    response: Any
    code: grpc.StatusCode
    message: str
    metadata: tuple[tuple[str, str], ...]
    # the client's own id for the request ("" if it sent none, or none read)
    request_id: str
    # For a response: gives its bytes back within the in-flight bytes once grpc has taken it
    # (`Edge.written`); the door calls it then (with the call's context, as grpc's done
    # callback is), or when the call ends unsent. A second call does nothing.
    written: Callable[[object], None] | None = None


class InferDoor:
    """``reader``: how a call's message is read (under the memory bound and body timeout)."""

    def __init__(self, app: DoorApp, reader: MessageReader) -> None:
        # its edge is read per call: a reload's takes over at once
        self._app = app
        self.reader = reader

    async def __call__(self, requests: Any, context: Context) -> Any:
        """ModelInfer, served as a client-streaming method (the same on the wire) so that the
        door reads the message when it has room for it (`gateway.grpc_door.receive`)."""
        answer = await self._receive_and_answer(context)
        if answer.metadata:
            context.set_trailing_metadata(answer.metadata)
        if answer.response is not None:
            if answer.written is not None:
                # Run once the call has ended: its response and status taken by grpc's
                # transport (or the call cancelled). What the door cannot know is when those
                # bytes reach the socket; the client's HTTP/2 window bounds what grpc keeps.
                # (grpc's stubs type the callback as a class of theirs, not a protocol)
                context.add_done_callback(answer.written)  # type: ignore[arg-type]
            return answer.response
        # The message is no local of this frame: grpc keeps the abort's exception, and so
        # this frame, in a reference cycle until a full collection (its bytes with them).
        await context.abort(answer.code, answer.message)

    async def _receive_and_answer(self, context: Context) -> GrpcAnswer:
        try:
            received = await self.reader.read(context)
            if received is None:
                raise missing_request()
        except CallRefused as refused:
            return GrpcAnswer(None, refused.code, refused.message, refused.metadata, "")
        return await self.answer(
            received.data, context.invocation_metadata(), context.time_remaining, received.hold
        )

    async def answer(
        self,
        data: bytes,
        metadata: Any,
        time_remaining: Callable[[], float | None],
        hold: Hold,
    ) -> GrpcAnswer:
        """The edge's answer to one ModelInfer message, under the call's ``metadata`` and
        deadline (``time_remaining``); recorded (`Edge.done`) before it returns. A cancelled
        call is recorded as 499, or 504 past its deadline, and re-raised. ``hold``: the
        message's bytes within the in-flight bytes, handed to the edge; a response's are given
        back when the door calls its ``written``, the rest at `done`."""
        parsed = self._parsed(data, hold)
        if isinstance(parsed, GrpcAnswer):
            return parsed
        request, views = parsed
        edge = self._app.edge
        headers = edge_headers(metadata, time_remaining())
        arrival = edge.arrive(request.model_name, request.model_version or None, headers, hold.peer)
        # the edge counts the message's bytes from here, and gives them back
        arrival.held, arrival.account, arrival.counted = hold.held, hold.account, True
        status, served_by, degraded, sent = CLIENT_CLOSED, "", None, -1
        # a response's bytes stay held until grpc has taken it
        written = True
        try:
            try:
                result = await edge.infer(arrival, _body_reader(request, views, headers))
                answer = _ok_answer(result, arrival, request.id, edge)
            except ProtocolError as exc:
                # a checked reply that gRPC cannot carry
                log.error("reply not sent over gRPC: %s", exc.message)
                raise GatewayError(f"the reply cannot be sent over gRPC: {exc.message}") from exc
            status, served_by, degraded = 200, result.served_by, result.degraded
            sent, written = len(result.body), False
            return answer
        except GatewayError as error:
            status = error.status
            trailing = (*error_metadata(error), ("x-attempts", str(arrival.attempts)))
            metadata_out = (*trailing, *_call_metadata(arrival))
            return GrpcAnswer(None, code_of(error.status), error.message, metadata_out, request.id)
        except asyncio.CancelledError:
            remaining = time_remaining()
            expired = remaining is not None and remaining <= DEADLINE_SKEW_S
            status = 504 if expired else CLIENT_CLOSED
            raise
        except Exception:
            # the one place an unexpected bug meets a gRPC client, as REST's
            log.exception("unexpected error in ModelInfer for %r", request.model_name)
            status = 500
            internal = "internal gateway error (logged)"
            return GrpcAnswer(None, grpc.StatusCode.INTERNAL, internal, (), request.id)
        finally:
            edge.done(arrival, status, served_by, degraded, sent, written)

    def _parsed(
        self, data: bytes, hold: Hold
    ) -> tuple[pb.ModelInferRequest, list[memoryview]] | GrpcAnswer:
        """The message as a ModelInferRequest and its raw tensor views, or gRPC's refusal of
        what is none; the message's hold is given back when it goes no further."""
        try:
            return read_infer_request(data)
        except ProtocolError as exc:
            # not a ModelInferRequest: gRPC's own refusal, named
            self.reader.release(hold)
            return GrpcAnswer(None, grpc.StatusCode.INVALID_ARGUMENT, exc.message, (), "")
        except BaseException:
            self.reader.release(hold)
            raise


def _body_reader(
    request: pb.ModelInferRequest, views: list[memoryview], headers: dict[str, str]
) -> BodyReader:
    """The message's body as the edge reads it: the JSON head, then each binary tensor."""
    # the binary tensors still to read, last first
    tensors: list[Raw] = []

    async def read() -> tuple[Raw, bool]:
        if tensors:
            return tensors.pop(), bool(tensors)
        if not views:
            # a slice at a time: the loop stays free
            await typed_to_raw(request)
        try:
            head, raws = grpc_to_rest_parts(
                request, binary_outputs=True, raw_contents=views or None
            )
        except ProtocolError as exc:
            raise BadRequest(exc.message) from exc
        if raws:
            headers[HEADER_LENGTH] = str(len(head))
            tensors.extend(reversed(raws))
        return head, bool(raws)

    return read


def _ok_answer(result: InferAnswer, arrival: Arrival, request_id: str, edge: Edge) -> GrpcAnswer:
    """A 2xx result as a ModelInferResponse, with the served metadata REST's door sends as
    headers; its bytes are given back once grpc has written it (`Edge.written`)."""
    if not 200 <= result.status < 300:
        # the attempt layer passes only 2xx
        raise GatewayError(f"a replica answered {result.status}")
    response = rest_to_grpc_response(result.body, result.header_length)
    served = [("x-served-by", result.served_by), ("x-attempts", str(result.attempts))]
    if result.degraded:
        served.append(("x-degraded", result.degraded))
    if result.vote:
        served.append(("x-vote", result.vote))
    metadata_out = (*served, *_call_metadata(arrival))
    return GrpcAnswer(
        response, grpc.StatusCode.OK, "", metadata_out, request_id, lambda _: edge.written(arrival)
    )


def edge_headers(metadata: Any, remaining_s: float | None) -> dict[str, str]:
    """The call's metadata the edge reads, as its headers; the gRPC deadline as the timeout
    (the tighter of it and a client's ``x-request-timeout-ms``)."""
    headers = {k: v for k, v in metadata or () if k in _WANTED and isinstance(v, str)}
    if remaining_s is not None:
        ms = max(remaining_s * 1000.0, 1.0)
        given = headers.get(TIMEOUT_HEADER)
        try:
            ms = min(ms, float(given)) if given else ms
        except ValueError:
            # the edge answers a bad header as REST's (400)
            pass
        else:
            headers[TIMEOUT_HEADER] = f"{ms:.3f}"
    return headers


def _call_metadata(arrival: Arrival) -> list[tuple[str, str]]:
    """What every answer carries: the request's id, and its trace where traced."""
    out = [("x-request-id", arrival.request_id)]
    if arrival.span.traceparent:
        out.append(("traceparent", arrival.span.traceparent))
    return out

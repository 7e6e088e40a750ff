"""The edge's steps, one rule each, in the order `gateway.pipeline.edge.Edge` runs them.

Each step is a small object holding what it needs (the tenants' keys, the body limit, the
parser, the models' schemas) and one call; only reading the body and parsing a large one await.
None of them knows the transport: a front door hands them decoded headers and a `BodyReader`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Protocol

from gateway.call import InferCall
from gateway.clock import Clock
from gateway.config.models import ModelConfig
from gateway.config.tenants import ANONYMOUS
from gateway.deadline import Deadline, timeout_from_header
from gateway.errors import PayloadTooLarge, Unauthorized
from gateway.memory.inflight_bytes import READ_BYTES, Holder, InflightBytes
from gateway.telemetry.spans import RequestSpan
from gateway.v2.body import Body, Piece
from gateway.v2.identity import upstream_id, with_request_id
from gateway.v2.request import (
    HEADER_LENGTH,
    InferRequestInfo,
    check_infer_request,
    fast_json_request,
)
from gateway.v2.schema import ModelSchema
from v2proto.codec import BINARY_CONTENT_TYPE

# The next chunk (bytes, or a view of a buffer the door holds: gRPC's message), and whether more
# follow.
BodyReader = Callable[[], Awaitable[tuple[Piece, bool]]]
# decoded headers -> tenant (`Unauthorized`)
TenantOf = Callable[[Mapping[str, str]], str]
# name, version -> the model (`NotFound`)
ModelOf = Callable[[str, str | None], ModelConfig]
# model name -> its signature, once known
SchemaOf = Callable[[str], ModelSchema | None]
JSON_BODY: Mapping[str, str] = MappingProxyType({"content-type": "application/json"})


class Parser(Protocol):
    """Parses bodies over ``inline_max_bytes`` off the event loop (`gateway.api.parsing`);
    JSON bodies the fast path takes are checked inline up to ``fast_inline_max_bytes``."""

    inline_max_bytes: int
    fast_inline_max_bytes: int

    async def offload(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo: ...


class Caller:
    """Who asks, and for which model: 401 for a key nobody holds, 404 for no such model, 401
    for an anonymous request to a model whose ``auth.require_key`` is set."""

    __slots__ = ("_model_of", "_tenant_of")

    def __init__(self, tenant_of: TenantOf, model_of: ModelOf) -> None:
        self._tenant_of = tenant_of
        self._model_of = model_of

    def tenant(self, headers: Mapping[str, str]) -> str:
        return self._tenant_of(headers)

    def model(self, name: str, version: str | None, tenant: str) -> ModelConfig:
        model = self._model_of(name, version)
        if tenant == ANONYMOUS and model.auth.require_key:
            raise Unauthorized(
                f"model {name!r} needs an API key: Authorization: Bearer <key> (or x-api-key)"
            )
        return model


class BoundedBody:
    """The whole body, up to ``max_bytes`` (413): a declared length over it is refused before
    a byte is read, and reading stops at the first chunk that crosses it. The body is kept as
    the chunks it arrived in (`Body`): nothing joins them unless it needs one buffer.

    Under the in-flight bytes (``memory``), a body holds what has arrived plus ``ahead`` (one
    read's worth, `READ_BYTES`), never more than it declared: the edge holds `first_hold`
    before the first read, and each further read waits for room for the next (`InflightBytes.
    hold`, else `wait`: 503 when none comes). Once read whole it holds its size. A body that
    arrives in one chunk, as a small one does, costs a comparison."""

    __slots__ = ("_ahead", "_first", "_memory", "max_bytes")

    def __init__(
        self, max_bytes: int, memory: InflightBytes | None = None, ahead: int = READ_BYTES
    ) -> None:
        self.max_bytes = max_bytes
        self._memory = memory
        self._ahead = ahead
        # what an undeclared body holds before it is read
        self._first = min(ahead, max_bytes)

    def first_hold(self, declared: str | None) -> int:
        """The bytes to hold before the body is read: a declared body up to one read's worth,
        else one read's worth; a length over the body cap holds none, for the 413."""
        ahead = self._first
        if declared is not None and declared.isdigit():
            size = int(declared)
            if size <= ahead:
                return size
            if size > self.max_bytes:
                return 0
        return ahead

    async def __call__(
        self, declared: str | None, read: BodyReader, holder: Holder | None = None
    ) -> Body:
        """``holder``: whose hold grows as the body arrives (None: the body is not counted
        here)."""
        limit = self.max_bytes
        # the most the body may hold
        end = limit
        if declared is not None and declared.isdigit():
            end = int(declared)
            if end > limit:
                raise PayloadTooLarge(f"request body over {limit} bytes")
        chunk, more = await read()
        if more:
            return await self._chunks(chunk, read, end, holder)
        # the usual case: one chunk
        size = len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
        if holder is not None and size != holder.held and self._memory is not None:
            # not the small body it declared: its size
            self._memory.settle(holder, size)
        return Body((chunk,), size)

    async def _chunks(
        self, chunk: Piece, read: BodyReader, end: int, holder: Holder | None
    ) -> Body:
        """A body of more than one chunk; ``end``: the most it may hold."""
        limit, memory = self.max_bytes, self._memory
        chunks = [chunk]
        size = len(chunk)
        more = True
        while more:
            if size > limit:
                raise PayloadTooLarge(f"request body over {limit} bytes")
            if holder is not None and memory is not None:
                want = min(size + self._ahead, end)
                # room for the next read, or a wait for it
                if want > holder.held and not memory.hold(holder, want):
                    await memory.wait(holder, want)
            chunk, more = await read()
            size += len(chunk)
            chunks.append(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
        if holder is not None and size != holder.held and memory is not None:
            # read whole: its size (a chunked one's)
            memory.settle(holder, size)
        return Body([c for c in chunks if c], size)


def timeout_of(raw: str | None, model: ModelConfig) -> float:
    """Seconds the request may take: ``x-request-timeout-ms`` capped by the model's
    ``max_timeout_ms`` (400 if not a positive number), else the model's ``timeout_ms``."""
    if raw is None:
        # as `timeout_from_header` answers it, without reading the cap (each read of a config
        # goes through a pydantic model's ``__getattr__`` hook)
        return model.timeout_ms / 1000.0
    return timeout_from_header(raw, model.timeout_ms, model.max_timeout_ms)


class Parse:
    """The V2 structure (400): inline when the JSON to parse is at most the parser's
    ``inline_max_bytes``, else off the event loop, so one big body never stalls the other
    clients. A binary tensor request's JSON is its header alone (a few hundred bytes): its
    tensor bytes are checked in place, by sizes and numpy, and never leave the process. A JSON
    body up to ``fast_inline_max_bytes`` whose data is flat lists of floats is checked inline by
    the fast path (`gateway.v2.json_fast`, where shipping it to a worker costs more than
    checking it; loadtests/bench_payloads.py); one the fast path declines goes to the
    offload."""

    __slots__ = ("_fast_max", "_inline_max", "_parser")

    def __init__(self, parser: Parser) -> None:
        self._parser = parser
        self._inline_max = parser.inline_max_bytes
        self._fast_max = parser.fast_inline_max_bytes

    def inline(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo | None:
        """The request checked here and now when its JSON is small enough (no coroutine: the
        small request's case), else None: the caller awaits the call itself."""
        size = body.size
        if header_length is not None and header_length.isdigit():
            size = min(size, int(header_length))
        if size <= self._inline_max:
            return check_infer_request(body, header_length, max_rows)
        return None

    async def __call__(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        info = self.inline(body, header_length, max_rows)
        if info is not None:
            return info
        size = body.size
        if header_length is None and size <= self._fast_max:
            info = fast_json_request(body, max_rows)
            if info is not None:
                return info
        return await self._parser.offload(body, header_length, max_rows)


class SchemaCheck:
    """The model's signature (400): a bad input never costs a replica. Where no signature is
    known yet (no declared one, metadata not fetched), the replicas check."""

    __slots__ = ("_schema_of",)

    def __init__(self, schema_of: SchemaOf) -> None:
        self._schema_of = schema_of

    def __call__(self, model_name: str, request: InferRequestInfo) -> None:
        schema = self._schema_of(model_name)
        if schema is not None:
            schema.check(request.header)


class CallBuilder:
    """The frozen `InferCall`: an id of its own in its body (`upstream_id`: the client's id,
    or its ``x-request-id``, made unique, so a reply for another request, even one with the
    same client id, is caught), the headers to forward, the deadline from arrival."""

    __slots__ = ("_clock",)

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def __call__(
        self,
        model_name: str,
        model: ModelConfig,
        body: Body,
        header_length: str | None,
        request: InferRequestInfo,
        request_id: str,
        arrived: float,
        timeout_s: float,
        span: RequestSpan,
        tenant: str,
    ) -> InferCall:
        client_id = request.id if request.id is not None else request_id
        sent_id = upstream_id(client_id)
        body, header_length, request = with_request_id(body, header_length, request, sent_id)
        forwarded: Mapping[str, str]
        if header_length is None:
            forwarded = JSON_BODY
        else:
            # binary tensors after the JSON header: not a JSON body (KServe parses those)
            forwarded = {"content-type": BINARY_CONTENT_TYPE, HEADER_LENGTH: header_length}
        return InferCall(
            model_name=model_name,
            model=model,
            body=body,
            upstream_headers=forwarded,
            deadline=Deadline(self._clock, arrived, arrived + timeout_s),
            request_id=request_id,
            request=request,
            span=span,
            tenant=tenant,
            client_id=client_id,
        )


def rows(request: InferRequestInfo) -> int:
    """Rows of a valid request: its first input's first dimension (1 for a scalar)."""
    shape = request.header["inputs"][0]["shape"]
    return shape[0] if shape else 1

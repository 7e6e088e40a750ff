"""The edge, driven without any transport: the steps' order, their refusals, the call it builds.

This test is a front door of its own (headers as a dict, the body as a list of chunks), as the
gRPC door will be: the edge knows nothing of ASGI. The REST door's I/O is tested in
tests/gateway/api.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from gateway.admission.tenant_limits import TenantLimits
from gateway.call import InferAnswer, InferCall
from gateway.config import parse_config
from gateway.config.models import ModelConfig
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.errors import (
    BadRequest,
    GatewayError,
    NotFound,
    PayloadTooLarge,
    TooManyRequests,
    Unauthorized,
)
from gateway.pipeline.build import build_edge
from gateway.pipeline.edge import Arrival, Edge
from gateway.telemetry.tracing import Tracer
from gateway.v2.body import Body
from gateway.v2.request import InferRequestInfo, parse_infer_request
from gateway.v2.schema import ModelSchema
from tests.support.clock import FakeClock

ROW = {"inputs": [{"name": "input", "shape": [2, 4], "datatype": "FP32", "data": [0.5] * 8}]}
BODY = orjson.dumps(ROW)
REPLY = b'{"model_name":"digits-mlp","model_version":"7","outputs":[]}'
CONFIG = parse_config(
    {
        "pools": {
            "p": {"model": "digits-mlp", "replicas": [{"id": "r0", "url": "http://127.0.0.1:9000"}]}
        },
        "models": {
            "digits": {"pool": "p", "timeout_ms": 1000, "max_timeout_ms": 2000},
            "keyed": {"pool": "p", "auth": {"require_key": True}},
        },
    }
)
SCHEMA = ModelSchema.from_metadata(
    {"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]}
)


class Door:
    """What a front door gives the edge: decoded headers and a body reader over chunks."""

    def __init__(self, *chunks: bytes, **headers: str) -> None:
        self.chunks = list(chunks) or [BODY]
        self.headers = {k.replace("_", "-"): v for k, v in headers.items()}
        self.reads = 0

    async def read(self) -> tuple[bytes, bool]:
        self.reads += 1
        return self.chunks[self.reads - 1], self.reads < len(self.chunks)


class Parser:
    inline_max_bytes = 1024
    fast_inline_max_bytes = 0

    def __init__(self) -> None:
        self.offloaded: list[int] = []

    async def offload(
        self, body: Body, header_length: str | None, max_rows: int | None
    ) -> InferRequestInfo:
        self.offloaded.append(len(body))
        return parse_infer_request(body.joined(), header_length, max_rows)


class Setup:
    def __init__(
        self, *, max_in_flight: int | None = None, max_body: int = 4096, fast_inline_max: int = 0
    ) -> None:
        self.clock = FakeClock()
        self.calls: list[InferCall] = []
        self.observed: list[tuple[Any, ...]] = []
        self.in_flight_seen: list[int] = []
        self.parser = Parser()
        self.parser.fast_inline_max_bytes = fast_inline_max
        self.schema: ModelSchema | None = SCHEMA
        self.limits = TenantLimits({"acme": TenantConfig(max_in_flight=max_in_flight)}, self.clock)
        self.edge: Edge = build_edge(
            self.pipeline,
            self.clock,
            Tracer(),
            self.observe,
            tenant_of=self.tenant_of,
            model_of=self.model_of,
            tenants=self.limits,
            max_body_bytes=max_body,
            parser=self.parser,
            schema_of=lambda name: self.schema,
        )

    @staticmethod
    def tenant_of(headers: Mapping[str, str]) -> str:
        key = headers.get("x-api-key")
        if key is None:
            return ANONYMOUS
        if key != "acme-key":
            raise Unauthorized("unknown API key")
        return "acme"

    @staticmethod
    def model_of(name: str, version: str | None) -> ModelConfig:
        if name not in CONFIG.models:
            raise NotFound(f"model {name!r} not found")
        return CONFIG.models[name]

    async def pipeline(self, call: InferCall) -> InferAnswer:
        self.calls.append(call)
        limiter = self.limits.limiters.get("acme")
        self.in_flight_seen.append(limiter.in_flight if limiter is not None else -1)
        self.clock.advance(0.25)
        return InferAnswer(200, REPLY, "application/json", None, "r0", 1)

    def observe(self, *args: Any) -> None:
        self.observed.append(args)

    def arrive(self, door: Door, model: str = "digits") -> Arrival:
        return self.edge.arrive(model, None, door.headers)

    async def infer(self, door: Door, model: str = "digits") -> tuple[Arrival, InferAnswer]:
        arrival = self.arrive(door, model)
        result = await self.edge.infer(arrival, door.read)
        self.edge.done(arrival, result.status, result.served_by, result.degraded, len(result.body))
        return arrival, result

    async def refused(self, door: Door, model: str = "digits") -> tuple[Arrival, GatewayError]:
        arrival = self.arrive(door, model)
        with pytest.raises(GatewayError) as info:
            await self.edge.infer(arrival, door.read)
        self.edge.done(arrival, info.value.status)
        return arrival, info.value


async def test_a_request_becomes_the_frozen_call_and_its_answer_is_recorded() -> None:
    setup = Setup()
    door = Door(x_api_key="acme-key", x_request_id="req-9", x_request_timeout_ms="500")
    arrival, result = await setup.infer(door)
    (call,) = setup.calls
    assert call.request_id == "req-9" and call.tenant == "acme"
    assert call.request is not None and call.client_id == "req-9"
    # replies must echo the id sent upstream: the client's, made unique
    assert call.request.id is not None and call.request.id.startswith("req-9~")
    assert orjson.loads(call.body.joined())["id"] == call.request.id
    assert call.upstream_headers == {"content-type": "application/json"}
    assert call.deadline.started_at == arrival.arrived
    assert call.deadline.expires_at == arrival.arrived + 0.5
    assert orjson.loads(result.body)["model_name"] == "digits"  # in the client's names
    (observed,) = setup.observed
    sent = len(result.body)
    answered = arrival.arrived + 0.25  # when it was answered, for the telemetry's stamps
    assert observed == ("digits", 200, "r0", 0.25, None, 0.5, "acme", len(BODY), sent, 2, answered)


async def test_the_models_own_timeout_is_not_the_clients() -> None:
    setup = Setup()
    await setup.infer(Door())
    assert setup.calls[0].deadline.timeout_s == 1.0
    assert setup.observed[0][5] is None  # the SLOs see no deadline the client chose
    assert setup.observed[0][6] == ANONYMOUS


async def test_the_tenants_limits_refuse_before_the_body_is_read() -> None:
    setup = Setup(max_in_flight=1)
    setup.limits.get("acme").enter()  # another request of acme's is in flight
    door = Door(x_api_key="acme-key")
    arrival, error = await setup.refused(door)
    assert isinstance(error, TooManyRequests) and door.reads == 0 and not setup.calls
    assert arrival.received == -1 and setup.observed[0][1] == 429


async def test_the_limit_is_held_until_the_answer_and_released_after_a_refusal() -> None:
    setup = Setup(max_in_flight=1)
    await setup.infer(Door(x_api_key="acme-key"))
    assert setup.in_flight_seen == [1]
    _, error = await setup.refused(Door(b"{", x_api_key="acme-key"))  # not JSON: 400
    assert isinstance(error, BadRequest)
    assert setup.limits.limiters["acme"].in_flight == 0


async def test_a_key_nobody_holds_is_refused_before_the_model_is_looked_up() -> None:
    _, error = await Setup().refused(Door(x_api_key="wrong"), model="no-such-model")
    assert isinstance(error, Unauthorized)


async def test_a_model_that_needs_a_key_refuses_anonymous_requests() -> None:
    setup = Setup()
    _, error = await setup.refused(Door(), model="keyed")
    assert isinstance(error, Unauthorized) and "needs an API key" in error.message
    _, result = await setup.infer(Door(x_api_key="acme-key"), model="keyed")
    assert result.status == 200


async def test_the_body_is_bounded_before_and_while_it_is_read() -> None:
    setup = Setup(max_body=100)
    declared = Door(content_length="101")
    _, error = await setup.refused(declared)
    assert isinstance(error, PayloadTooLarge) and declared.reads == 0
    streamed = Door(b"x" * 60, b"x" * 60, b"never read")
    _, error = await setup.refused(streamed)
    assert isinstance(error, PayloadTooLarge) and streamed.reads == 2


async def test_a_body_in_chunks_is_joined() -> None:
    setup = Setup()
    arrival, _ = await setup.infer(Door(BODY[:10], BODY[10:20], BODY[20:]))
    assert arrival.received == len(BODY) and arrival.rows == 2


async def test_a_large_body_is_parsed_off_the_event_loop() -> None:
    setup = Setup(max_body=1 << 20)
    rows = {
        "inputs": [{"name": "input", "shape": [64, 4], "datatype": "FP32", "data": [0.5] * 256}]
    }
    body = orjson.dumps(rows)
    assert len(body) > Parser.inline_max_bytes
    await setup.infer(Door(body))
    await setup.infer(Door(BODY))
    assert setup.parser.offloaded == [len(body)]


async def test_a_large_json_body_of_floats_is_checked_inline_by_the_fast_path() -> None:
    setup = Setup(max_body=1 << 20, fast_inline_max=1 << 20)
    floats = {
        "inputs": [{"name": "input", "shape": [64, 4], "datatype": "FP32", "data": [0.5] * 256}]
    }
    body = orjson.dumps(floats)
    assert len(body) > Parser.inline_max_bytes
    await setup.infer(Door(body))
    assert setup.parser.offloaded == []  # checked inline, its numbers never decoded
    request = setup.calls[-1].request
    assert request is not None and "data" not in request.header["inputs"][0]
    declined = orjson.dumps({"inputs": [{**floats["inputs"][0], "data": ["0.5"] * 256}]})
    _, error = await setup.refused(Door(declined))  # the fast path declines: the offload judges
    assert setup.parser.offloaded == [len(declined)] and isinstance(error, BadRequest)


async def test_a_request_the_schema_refuses_never_reaches_the_pipeline() -> None:
    setup = Setup()
    wrong = orjson.dumps({"inputs": [{**ROW["inputs"][0], "name": "pixels"}]})
    arrival, error = await setup.refused(Door(wrong))
    assert isinstance(error, BadRequest) and "unknown input 'pixels'" in error.message
    assert not setup.calls and arrival.received == len(wrong) and arrival.attempts == 0
    setup.schema = None  # not known yet: the replicas check
    await setup.infer(Door(wrong))
    assert len(setup.calls) == 1


async def test_a_timeout_header_that_is_not_a_number_is_a_400() -> None:
    _, error = await Setup().refused(Door(x_request_timeout_ms="soon"))
    assert isinstance(error, BadRequest) and "x-request-timeout-ms" in error.message


async def test_an_answered_request_leaves_no_cycle_for_the_collector() -> None:
    """Its call and arrival hold each other until `done`: a cycle left would be about twenty
    objects a request that only the collector frees, and its passes are CPU on every worker."""
    setup = Setup()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        await setup.infer(Door(x_api_key="acme-key"))
        setup.calls.clear()
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not left & {"Arrival", "InferCall", "Ledger", "Deadline", "Body"}

"""The edge holds a request's bytes in the gateway-wide budget from its head to its answer."""

from __future__ import annotations

import pytest

from gateway.errors import Overloaded
from gateway.pipeline.build import build_edge
from gateway.policies.byte_budget import InflightBytes
from gateway.telemetry.tracing import Tracer
from tests.gateway.pipeline.test_edge import BODY, REPLY, Door, Setup


def budgeted(limit: int) -> tuple[Setup, InflightBytes]:
    setup, memory = Setup(), InflightBytes(limit, wait_s=0.0)
    setup.edge = build_edge(
        setup.pipeline, setup.clock, Tracer(), setup.observe,
        tenant_of=setup.tenant_of, model_of=setup.model_of, tenants=setup.limits,
        max_body_bytes=4096, parser=setup.parser, schema_of=lambda name: setup.schema,
        memory=memory,
    )  # fmt: skip
    return setup, memory


async def test_a_request_holds_its_body_and_answer_until_done_then_gives_them_back() -> None:
    setup, memory = budgeted(1 << 20)
    door = Door(content_length=str(len(BODY)))
    intake = setup.arrive(door)
    result = await setup.edge.infer(intake, door.read)
    assert memory.held == intake.held == len(BODY) + len(result.body)
    setup.edge.done(intake, 200, "r0", None, len(result.body))
    assert memory.held == 0 and memory.peak == len(BODY) + len(result.body)


async def test_an_undeclared_body_is_counted_once_read() -> None:
    setup, memory = budgeted(1 << 20)
    door = Door(BODY[:10], BODY[10:])  # chunked: no Content-Length
    intake = setup.arrive(door)
    result = await setup.edge.infer(intake, door.read)
    assert intake.held == len(BODY) + len(result.body) and result.body != REPLY  # renamed
    setup.edge.done(intake, 200)
    assert memory.held == 0


async def test_a_body_that_does_not_fit_is_refused_with_503_before_it_is_read() -> None:
    setup, memory = budgeted(len(BODY) + 10)
    memory.add(20)  # another request's answer being written
    door = Door(content_length=str(len(BODY)))
    intake, error = await setup.refused(door)
    assert isinstance(error, Overloaded) and error.headers()["retry-after"] == "1"
    assert door.reads == 0 and not setup.calls
    assert memory.held == 20 and intake.held == 0


async def test_a_crash_in_the_pipeline_gives_the_bytes_back_though_no_done_follows() -> None:
    setup, memory = budgeted(1 << 20)

    async def crash(call: object) -> object:
        raise RuntimeError("a bug")

    setup.edge._pipeline = crash  # type: ignore[assignment]
    door = Door(content_length=str(len(BODY)))
    intake = setup.arrive(door)
    with pytest.raises(RuntimeError):
        await setup.edge.infer(intake, door.read)
    assert memory.held == 0 and intake.held == 0

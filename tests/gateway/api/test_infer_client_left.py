"""REST's infer handler when its client leaves: the protocol's hook cancels the request, which is
recorded once as 499 and gives back everything it held; nothing is written.

The handler runs as ASGI, on the edge of tests/gateway/pipeline/test_edge.py with a pipeline that
waits for ever; the test takes the hook from the scope and calls it, as the server protocol does
when the connection is lost (tests/gateway/server/test_protocol.py shows the protocol's side).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gateway.api.infer import CLIENT_LEFT_KEY, InferEndpoint
from gateway.errors import CLIENT_CLOSED
from gateway.memory.inflight_bytes import InflightBytes
from gateway.pipeline.build import build_edge
from gateway.pipeline.call import InferCall, InferResult
from gateway.telemetry.tracing import Tracer
from tests.gateway.pipeline.test_edge import BODY, Setup


class Waiting(Setup):
    """The edge's setup with a pipeline that never answers, and in-flight bytes."""

    def __init__(self) -> None:
        super().__init__(max_in_flight=4)
        self.memory = InflightBytes(1 << 20, wait_s=0.0)
        self.entered = asyncio.Event()
        self.cancelled = 0
        self.edge = build_edge(
            self.pipeline,
            self.clock,
            Tracer(),
            self.observe,
            tenant_of=self.tenant_of,
            model_of=self.model_of,
            tenants=self.limits,
            max_body_bytes=4096,
            parser=self.parser,
            schema_of=lambda name: self.schema,
            memory=self.memory,
        )

    async def pipeline(self, call: InferCall) -> InferResult:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


def request() -> tuple[dict[str, Any], Any, list[Any]]:
    """A scope, a receive that hands over the body, and the list of what was sent."""
    headers = [(b"content-length", b"%d" % len(BODY)), (b"x-api-key", b"acme-key")]
    scope: dict[str, Any] = {"type": "http", "headers": headers}
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": BODY, "more_body": False}

    return scope, receive, sent


async def served(setup: Waiting) -> tuple[asyncio.Task[None], dict[str, Any], list[Any]]:
    scope, receive, sent = request()

    async def send(message: Any) -> None:
        sent.append(message)

    handler = InferEndpoint(setup.edge)
    task = asyncio.ensure_future(handler(scope, receive, send, "digits", None))
    async with asyncio.timeout(5):
        await setup.entered.wait()
    assert setup.memory.held == len(BODY) and setup.limits.limiters["acme"].in_flight == 1
    return task, scope, sent


async def test_a_client_that_leaves_cancels_its_request_recorded_once_as_499(
    caplog: pytest.LogCaptureFixture,
) -> None:
    setup = Waiting()
    task, scope, sent = await served(setup)
    with caplog.at_level(logging.INFO, logger="gateway.pipeline.cancel"):
        scope.pop(CLIENT_LEFT_KEY)()  # what the protocol does when the connection is lost
        await task  # returns: nothing for uvicorn to log, nobody to answer
    assert setup.cancelled == 1 and sent == []
    assert [o[1] for o in setup.observed] == [CLIENT_CLOSED]
    assert setup.memory.held == 0 and setup.limits.limiters["acme"].in_flight == 0
    (line,) = [r for r in caplog.records if "client left" in r.getMessage()]
    assert line.__dict__["status"] == CLIENT_CLOSED and line.__dict__["model"] == "digits"


async def test_a_request_cancelled_by_the_server_is_recorded_and_the_cancel_goes_on() -> None:
    setup = Waiting()
    task, scope, sent = await served(setup)
    task.cancel()  # the server's shutdown, not the client: uvicorn's to see
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [o[1] for o in setup.observed] == [CLIENT_CLOSED] and sent == []
    assert setup.memory.held == 0 and CLIENT_LEFT_KEY not in scope


async def test_the_hook_is_taken_back_once_the_answer_is_known() -> None:
    setup = Setup()
    scope, receive, sent = request()

    async def send(message: Any) -> None:
        sent.append(message)

    await InferEndpoint(setup.edge)(scope, receive, send, "digits", None)
    assert CLIENT_LEFT_KEY not in scope  # a connection lost now cancels nothing
    assert sent[0]["status"] == 200 and [o[1] for o in setup.observed] == [200]

"""A replica whose keep-alive stream falls out of step (it sends an answer late, ahead of the
next reply on the connection), against `Http1Transport` over real loopback sockets.

No framing check can see such bytes: they are a well-framed reply. Two rules of the transport
contract (`gateway.upstream.transport.base`) keep them from being read as another exchange's reply:
a reply refused as a protocol error is discarded, which closes its connection; and control
requests (GET: health, metadata) never ride a connection that carried an infer request.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import orjson
import pytest

from gateway.call import InferCall
from gateway.clock import MonotonicClock
from gateway.config import parse_config
from gateway.config.endpoint import Endpoint
from gateway.deadline import Deadline
from gateway.errors import ServiceUnavailable
from gateway.pipeline.build import build_pipeline
from gateway.retry.budget import RetryBudget
from gateway.upstream.probes.health import HealthProber
from gateway.upstream.registry import Registry
from gateway.upstream.transport.http1 import Http1Transport
from gateway.v2.body import Body
from gateway.v2.request import parse_infer_request
from tests.gateway.upstream.scripted_server import ScriptedServer, wait_until

LATE_COPY = "/late-copy"  # the scripted server's out-of-step replica (see `_late_copy`)


@pytest.fixture
async def transport() -> AsyncIterator[Http1Transport]:
    built = Http1Transport()
    try:
        yield built
    finally:
        await built.aclose()


async def _post(transport: Http1Transport, endpoint: Endpoint, body: bytes) -> bytes:
    reply = await transport.request(endpoint, "POST", LATE_COPY, body=body, timeout=5.0)
    assert reply.status == 200
    if reply.body != body:  # what the attempt layer does with another request's answer
        reply.discard()
    return reply.body


async def test_a_kept_reply_lets_the_late_answer_through(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    """The hazard, shown: a refused reply's connection left pooled hands the refused
    request's real answer, sent late, to the next exchange."""
    assert await _post(transport, endpoint, b"one") == b"one"
    reply = await transport.request(endpoint, "POST", LATE_COPY, body=b"two", timeout=5.0)
    assert reply.body == b"one"  # the late copy; refused, but not discarded
    again = await transport.request(endpoint, "POST", LATE_COPY, body=b"three", timeout=5.0)
    assert again.body == b"two"  # another request's answer
    assert server.accepted == 1


async def test_a_discarded_reply_closes_its_connection(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    assert await _post(transport, endpoint, b"one") == b"one"
    assert await _post(transport, endpoint, b"two") == b"one"  # the late copy: discarded
    assert transport.pooled(endpoint) == 0
    await wait_until(lambda: server.open_connections == 0)  # closed, not left idle
    # The next exchange gets a connection of its own and its own answer, never "two".
    assert await _post(transport, endpoint, b"three") == b"three"
    assert server.accepted == 2
    assert transport.pooled(endpoint) == 1


async def test_discard_on_a_reply_of_a_connection_already_closed_is_harmless(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    reply = await transport.request(endpoint, "POST", "/close", body=b"x", timeout=5.0)
    reply.discard()
    reply.discard()
    assert await _post(transport, endpoint, b"one") == b"one"
    assert server.accepted == 2


async def test_a_get_never_reads_a_late_infer_answer(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    assert await _post(transport, endpoint, b"one") == b"one"  # its copy is owed
    reply = await transport.request(endpoint, "GET", LATE_COPY, timeout=5.0)
    assert (reply.status, reply.body) == (503, b"not ready")  # not the late 200 "one"
    assert server.accepted == 2  # the control lane's own connection
    assert (transport.pooled(endpoint), transport.pooled(endpoint, control=True)) == (1, 1)
    again = await transport.request(endpoint, "GET", LATE_COPY, timeout=5.0)
    assert again.status == 503 and server.accepted == 2  # control connections are kept alive


async def test_forget_closes_both_lanes(
    transport: Http1Transport, server: ScriptedServer, endpoint: Endpoint
) -> None:
    await transport.request(endpoint, "POST", "/echo", body=b"x", timeout=5.0)
    await transport.request(endpoint, "GET", "/echo", timeout=5.0)
    assert server.open_connections == 2
    transport.forget(endpoint)
    await wait_until(lambda: server.open_connections == 0)


def _config(port: int) -> dict[str, object]:
    return {
        "pools": {
            "p": {
                "model": "digits-mlp",
                "version": "1",
                "binary_tensors": True,
                "replicas": [{"id": "r0", "url": f"http://127.0.0.1:{port}{LATE_COPY}"}],
            }
        },
        "models": {"digits": {"pool": "p"}},
    }


async def test_a_health_probe_does_not_pass_on_a_late_infer_answer(
    transport: Http1Transport, server: ScriptedServer
) -> None:
    """The replica is not ready (its ready endpoint says 503); a late 200 to an infer request,
    read in its place, would make the probe pass."""
    registry = Registry(parse_config(_config(server.port)), MonotonicClock())
    pool = registry.pools["p"]
    replica = pool.replicas[0]
    infer = await transport.request(
        replica.endpoint, "POST", pool.model_path("/infer"), body=b"{}", timeout=5.0
    )
    assert infer.status == 200  # its copy is owed on the infer connection
    prober = HealthProber(registry, transport, MonotonicClock(), random.Random(0))
    assert await prober.probe(pool, replica) == (False, "ready answered 503")


def _request(request_id: str) -> bytes:
    """An infer request whose echo is a well-formed V2 reply to it (the server echoes)."""
    label = {"name": "label", "datatype": "INT64", "shape": [1], "data": [3]}
    tensor = {"name": "input", "datatype": "FP32", "shape": [1], "data": [1.0]}
    return orjson.dumps({"id": request_id, "inputs": [tensor], "outputs": [label]})


async def test_the_attempt_layer_discards_a_refused_reply(
    transport: Http1Transport, server: ScriptedServer
) -> None:
    """Through the pipeline, one replica, no retry: the late copy of c1's answer is refused
    for c2 (the replica's failure); c2's own answer, sent late, must not reach c3."""
    clock = MonotonicClock()
    config = parse_config(_config(server.port))
    registry = Registry(config, clock)
    budget = RetryBudget(config.retry_budget, clock)
    pipeline = build_pipeline(registry, transport, budget, clock, random.Random(0))
    answered: list[str | None] = []
    for request_id in ("c1", "c2", "c3"):
        body = _request(request_id)
        call = InferCall(
            model_name="digits",
            model=config.models["digits"],
            body=Body.of(body),
            upstream_headers={},
            deadline=Deadline.after(clock, 5.0),
            request_id=request_id,
            request=parse_infer_request(body, None),
        )
        try:
            result = await pipeline.handler(call)
            answered.append(orjson.loads(result.body)["id"])
        except ServiceUnavailable:  # the refused one, with no other replica to try
            answered.append(None)
    assert answered == ["c1", None, "c3"]
    replica = registry.pools["p"].replicas[0]
    assert replica.failures == 1 and "'c1'" in (replica.last_error or "")
    assert server.accepted == 2

"""The pipeline end to end on a fake transport: routing, deadlines and error mapping."""

from __future__ import annotations

import random

import pytest

from gateway.clock import MonotonicClock
from gateway.config import GatewayConfig
from gateway.config.policies import RetryBudgetConfig
from gateway.deadline import Deadline
from gateway.errors import (
    DeadlineExceeded,
    RejectedByReplicas,
    UpstreamConnectError,
    UpstreamFailed,
)
from gateway.pipeline.build import build_pipeline
from gateway.pipeline.call import Handler, InferCall
from gateway.policies.budget import RetryBudget
from gateway.upstream.registry import Registry
from tests.gateway.conftest import make_config
from tests.gateway.fakes import FakeTransport, fail, hang, reply


def _build(registry: Registry, transport: FakeTransport) -> Handler:
    clock = MonotonicClock()
    budget = RetryBudget(RetryBudgetConfig(), clock)
    return build_pipeline(registry, transport, budget, clock, random.Random(0)).handler


def _call(config: GatewayConfig, timeout_s: float = 1.0) -> InferCall:
    return InferCall(
        model_name="digits",
        model=config.models["digits"],
        body=b"{}",
        upstream_headers={},
        deadline=Deadline.after(MonotonicClock(), timeout_s),
        request_id="t",
    )


async def test_success_reports_the_replica() -> None:
    config = make_config(replicas=1)
    transport = FakeTransport()
    pipeline = _build(Registry(config, MonotonicClock()), transport)
    result = await pipeline(_call(config))
    assert (result.status, result.served_by, result.attempts) == (200, "r0", 1)
    assert transport.calls["127.0.0.1:9000"] == ["POST /v2/models/digits-mlp/versions/1/infer"]


async def test_a_client_error_from_the_only_replica_reaches_the_client_uncharged() -> None:
    config = make_config(replicas=1)
    transport = FakeTransport({"127.0.0.1:9000": reply(400, b'{"error": "bad shape"}')})
    registry = Registry(config, MonotonicClock())
    pipeline = _build(registry, transport)
    with pytest.raises(RejectedByReplicas, match="refused by r0 \\(400\\): bad shape") as info:
        await pipeline(_call(config))
    assert info.value.status == 400
    assert registry.pools["p"].replicas[0].consecutive_failures == 0


async def test_server_error_becomes_503_with_the_reason() -> None:
    config = make_config(replicas=1)
    transport = FakeTransport({"127.0.0.1:9000": reply(500, b'{"error": "boom"}')})
    registry = Registry(config, MonotonicClock())
    pipeline = _build(registry, transport)
    with pytest.raises(UpstreamFailed, match="r0 answered 500: boom") as info:
        await pipeline(_call(config))
    assert info.value.status == 503
    replica = registry.pools["p"].replicas[0]
    assert (replica.consecutive_failures, replica.outstanding) == (1, 0)


async def test_connect_error_becomes_503() -> None:
    config = make_config(replicas=1)
    transport = FakeTransport({"127.0.0.1:9000": fail(UpstreamConnectError("refused"))})
    pipeline = _build(Registry(config, MonotonicClock()), transport)
    with pytest.raises(UpstreamFailed, match="connect_error: refused"):
        await pipeline(_call(config))


async def test_hang_becomes_504_at_the_deadline() -> None:
    config = make_config(replicas=1)
    registry = Registry(config, MonotonicClock())
    transport = FakeTransport({"127.0.0.1:9000": hang()})
    pipeline = _build(registry, transport)
    with pytest.raises(DeadlineExceeded, match="deadline of 50 ms exceeded"):
        await pipeline(_call(config, timeout_s=0.05))
    assert registry.pools["p"].replicas[0].outstanding == 0


async def test_unhealthy_replicas_are_avoided() -> None:
    config = make_config(replicas=3)
    registry = Registry(config, MonotonicClock())
    registry.pools["p"].replicas[0].healthy = False
    pipeline = _build(registry, FakeTransport())
    served = {(await pipeline(_call(config))).served_by for _ in range(30)}
    assert served == {"r1", "r2"}


async def test_panic_mode_spreads_over_all_when_too_few_are_healthy() -> None:
    config = make_config(replicas=3)
    registry = Registry(config, MonotonicClock())
    for replica in registry.pools["p"].replicas[:2]:
        replica.healthy = False
    pipeline = _build(registry, FakeTransport())
    served = {(await pipeline(_call(config))).served_by for _ in range(30)}
    assert served == {"r0", "r1", "r2"}
    assert registry.pools["p"].panic

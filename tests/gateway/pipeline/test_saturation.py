"""Saturation: while every eligible replica reports a queue over ``load.saturated_queue``,
sheddable requests (priority below 0) are shed at once with a Retry-After from the queues;
the others go through; a stale or missing reading is never taken for a full queue; the layer
is only in the path of a model some caller of which is sheddable."""

from __future__ import annotations

import random

import pytest

from gateway.call import InferCall
from gateway.config import parse_config
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.deadline import Deadline
from gateway.errors import Overloaded
from gateway.pipeline.build import build_pipeline, explain
from gateway.pipeline.saturation import sheddable
from gateway.policies.load_report import LoadReport
from gateway.retry.budget import RetryBudget
from gateway.telemetry.metrics import Metrics
from gateway.upstream.registry import Registry
from gateway.upstream.saturation import UNKNOWN_RATE_RETRY_S, saturation
from gateway.v2.body import Body
from tests.gateway.conftest import make_config
from tests.gateway.fakes import reply
from tests.gateway.pipeline.rig import OK, A, B, C, ClockedTransport
from tests.support.virtual_time import VirtualClock

TENANTS = {
    "batch": TenantConfig(key_env="BATCH_KEY", priority=-1),
    "live": TenantConfig(key_env="LIVE_KEY", priority=10),
}


def fill(registry: Registry, queue: float, at: float) -> None:
    for replica in registry.pools["p"].replicas:
        replica.mark_health(True)
        replica.report_load(LoadReport(queue), at)


def test_the_sheddable_callers_by_tenant_and_model_priority() -> None:
    model = make_config().models["digits"]
    assert sheddable(model, TENANTS) == {"batch"}
    low = make_config(priority=-5).models["digits"]
    assert sheddable(low, TENANTS) == {"batch", ANONYMOUS}  # live sets its own
    assert sheddable(model, {}) == frozenset()


def test_saturated_only_while_every_eligible_replica_reports_a_fresh_deep_queue() -> None:
    clock = VirtualClock()
    registry = Registry(make_config(), clock)
    pool = registry.pools["p"]
    assert saturation(pool, clock.now()) is None  # nothing reported: not saturated
    fill(registry, 9.0, clock.now())
    assert saturation(pool, clock.now()) == UNKNOWN_RATE_RETRY_S  # no latency known yet
    for replica in pool.replicas:
        replica.ewma_latency_s = 0.1
    # the least loaded replica's excess (9 - 5) at its rate (10 answers a second per 10 queued)
    assert saturation(pool, clock.now()) == pytest.approx((9 - 5) * 0.1 / 10)
    pool.replicas[1].report_load(LoadReport(2.0), clock.now())  # one replica has room
    assert saturation(pool, clock.now()) is None
    fill(registry, 9.0, clock.now())
    clock.advance(pool.config.load.stale_s + 0.01)  # stale: unknown, not full
    assert saturation(pool, clock.now()) is None
    fill(registry, 9.0, clock.now())
    pool.replicas[2].mark_health(False)  # the eligible ones decide
    assert saturation(pool, clock.now()) is not None


async def test_sheddable_requests_get_503_at_once_and_the_others_go_through() -> None:
    clock = VirtualClock()
    doc = {
        "pools": {"p": {"model": "digits-mlp", "binary_tensors": True, "replicas": [
            {"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"} for i in range(3)]}},
        "models": {"digits": {"pool": "p"}},
        "tenants": {"batch": {"key_env": "BATCH_KEY", "priority": -1},
                    "live": {"key_env": "LIVE_KEY", "priority": 10}},
    }  # fmt: skip
    config = parse_config(doc)
    registry = Registry(config, clock)
    transport = ClockedTransport(clock, {k: reply(200, OK) for k in (A, B, C)})
    pipeline = build_pipeline(
        registry, transport, RetryBudget(config.retry_budget, clock), clock, random.Random(0),
        metrics=Metrics(process=False), tenants=config.tenants, models=config.models,
    )  # fmt: skip

    def call(tenant: str) -> InferCall:
        return InferCall(
            "digits", config.models["digits"], Body.of(b"{}"), {}, Deadline.after(clock, 5), "t",
            tenant=tenant,
        )  # fmt: skip

    fill(registry, 40.0, clock.now())
    with pytest.raises(Overloaded) as shed:
        await pipeline.handler(call("batch"))
    assert shed.value.status == 503 and "retry-after" in shed.value.headers()
    assert transport.sent() == 0  # before any replica
    for tenant in ("live", ANONYMOUS):
        assert (await pipeline.handler(call(tenant))).status == 200
    clock.advance(config.pools["p"].load.stale_s + 0.01)
    assert (await pipeline.handler(call("batch"))).status == 200  # stale: not saturated


def test_the_layer_is_only_where_a_caller_is_sheddable() -> None:
    assert "saturation" not in explain(make_config(), "digits")
    assert "saturation" in explain(make_config(priority=-1), "digits")
    doc = {
        "pools": {"p": {"model": "m", "load_aware": False,
                        "replicas": [{"id": "r0", "url": "http://127.0.0.1:9000"}]}},
        "models": {"digits": {"pool": "p", "priority": -1}},
    }  # fmt: skip
    assert "saturation" not in explain(parse_config(doc), "digits")  # reports not read

from __future__ import annotations

import asyncio
import errno
import logging
import random

import pytest

from gateway.config.endpoint import Endpoint
from gateway.config.policies import HealthCheckConfig
from gateway.faults.classify import classify_status
from gateway.upstream.events import NullEvents
from gateway.upstream.probes.health import HealthProber, apply_probe, next_interval, readmit
from gateway.upstream.registry import Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport.local_errors import local_error
from tests.gateway.conftest import make_config
from tests.gateway.fakes import FakeTransport, fail, reply
from tests.support.clock import FakeClock

CONFIG = HealthCheckConfig(healthy_threshold=2, unhealthy_threshold=3)


def _replica() -> Replica:
    return Replica(id="r", pool="p", endpoint=Endpoint("127.0.0.1", 1))


def test_first_verdict_is_taken_at_once() -> None:
    up, down = _replica(), _replica()
    assert apply_probe(up, True, None, CONFIG) is True
    assert apply_probe(down, False, "refused", CONFIG) is False
    assert down.last_error == "health probe: refused"


def test_thresholds_apply_after_the_first_verdict() -> None:
    replica = _replica()
    apply_probe(replica, True, None, CONFIG)
    assert apply_probe(replica, False, "x", CONFIG) is None
    assert apply_probe(replica, False, "x", CONFIG) is None
    assert apply_probe(replica, False, "x", CONFIG) is False
    assert apply_probe(replica, True, None, CONFIG) is None
    assert replica.healthy is False
    assert apply_probe(replica, True, None, CONFIG) is True


def test_a_pass_resets_the_failure_streak() -> None:
    replica = _replica()
    apply_probe(replica, True, None, CONFIG)
    for _ in range(5):
        apply_probe(replica, False, "x", CONFIG)
        apply_probe(replica, False, "x", CONFIG)
        apply_probe(replica, True, None, CONFIG)
    assert replica.healthy is True


async def test_prober_marks_replicas_by_their_ready_endpoint() -> None:
    registry = Registry(make_config(replicas=2), FakeClock())
    transport = FakeTransport({"127.0.0.1:9001": reply(503, b"{}")})
    prober = HealthProber(registry, transport, FakeClock(), random.Random(0))
    pool = registry.pools["p"]
    for replica in pool.replicas:
        passed, error = await prober.probe(pool, replica)
        assert passed is not None
        apply_probe(replica, passed, error, pool.config.health)
    assert [r.healthy for r in pool.replicas] == [True, False]
    assert transport.calls["127.0.0.1:9000"] == ["GET /v2/models/digits-mlp/versions/1/ready"]


def _tripped_and_ejected(registry: Registry, clock: FakeClock) -> Replica:
    pool = registry.pools["p"]
    replica = pool.replicas[0]
    assert replica.breaker is not None
    for _ in range(pool.config.breaker.failure_threshold):
        assert replica.breaker.acquire()
        replica.breaker.record(classify_status(replica.id, 503, 0.01), "closed")
    assert pool.outlier.eject(replica, "test")
    replica.healthy = False
    return replica


def test_turning_healthy_gives_an_open_breaker_a_trial_and_ends_the_ejection() -> None:
    clock = FakeClock()
    registry = Registry(make_config(replicas=3), clock)
    pool = registry.pools["p"]
    replica = _tripped_and_ejected(registry, clock)
    assert replica.breaker is not None and replica.breaker.state() == "open"
    config = pool.config.health
    for _ in range(config.healthy_threshold - 1):
        assert apply_probe(replica, True, None, config) is None
    assert apply_probe(replica, True, None, config) is True
    readmit(pool, replica)
    assert replica.breaker.state() == "half-open"  # at once: the reset timeout has not passed
    assert not pool.outlier.is_ejected(replica)
    assert replica.breaker.acquire() and not replica.breaker.acquire()  # permits still bounded


def test_readmit_leaves_a_closed_breaker_and_a_live_replica_alone() -> None:
    clock = FakeClock()
    registry = Registry(make_config(replicas=2), clock)
    pool = registry.pools["p"]
    replica = pool.replicas[1]
    readmit(pool, replica)
    assert replica.breaker is not None and replica.breaker.state() == "closed"
    assert replica.breaker.transitions == 0


def test_an_unhealthy_replica_that_passes_is_probed_again_after_the_edge_interval() -> None:
    replica = _replica()
    config = HealthCheckConfig(interval_s=2.0, healthy_edge_interval_s=0.1, healthy_threshold=3)
    apply_probe(replica, False, "down", config)
    assert next_interval(replica, config) == 2.0  # failing: the normal pace
    apply_probe(replica, True, None, config)
    assert next_interval(replica, config) == 0.1
    apply_probe(replica, True, None, config)
    apply_probe(replica, True, None, config)
    assert replica.healthy is True
    assert next_interval(replica, config) == 2.0


async def test_the_probe_loop_readmits_a_restarted_replica_within_one_edge_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Virtual time: the replica goes down, its breaker opens, it comes back; the loop
    turns it healthy and half-opens its breaker long before the reset timeout. One replica,
    so only its loop moves the fake clock."""
    clock = FakeClock()
    half_opened: list[float] = []

    class Events(NullEvents):
        def breaker_transition(self, replica: str, old: str, new: str) -> None:
            if new == "half-open":
                half_opened.append(clock.now())

    registry = Registry(make_config(replicas=1), clock, Events())
    pool = registry.pools["p"]
    replica = _tripped_and_ejected(registry, clock)
    transport = FakeTransport({"127.0.0.1:9000": reply(200, b"{}")})
    back_at = clock.now()
    prober = HealthProber(registry, transport, clock, random.Random(0))
    caplog.set_level(logging.INFO, logger="gateway.upstream.probes.health")
    prober.start()
    try:
        for _ in range(1000):  # virtual time: each turn of the loop advances the fake clock
            if replica.breaker is not None and replica.breaker.state() == "half-open":
                break
            await asyncio.sleep(0)
    finally:
        await prober.stop()
    assert replica.healthy is True
    assert replica.breaker is not None and replica.breaker.state() == "half-open"
    assert not pool.outlier.is_ejected(replica)
    health = pool.config.health
    # the first probe passes at once, the next after the edge interval (jittered)
    took = half_opened[0] - back_at
    edge = health.healthy_edge_interval_s * (1 + health.jitter)
    assert took <= edge * (health.healthy_threshold - 1) + 1e-9
    assert took < pool.config.breaker.reset_timeout_s
    back = [r for r in caplog.records if r.getMessage() == "replica r0 is now healthy"]
    assert [r.levelno for r in back] == [logging.INFO]  # good news is no warning


async def test_a_probe_that_failed_for_the_gateways_own_shortage_is_no_verdict() -> None:
    registry = Registry(make_config(replicas=1), FakeClock())
    short = local_error(OSError(errno.EMFILE, "Too many open files"))
    assert short is not None
    transport = FakeTransport({"127.0.0.1:9000": fail(short)})
    prober = HealthProber(registry, transport, FakeClock(), random.Random(0))
    pool = registry.pools["p"]
    passed, error = await prober.probe(pool, pool.replicas[0])
    assert passed is None and error is not None and "EMFILE" in error

from __future__ import annotations

import random

from gateway.clock import FakeClock
from gateway.config.policies import HealthCheckConfig
from gateway.upstream.health import HealthProber, apply_probe
from gateway.upstream.registry import Registry
from gateway.upstream.replica import Replica
from gateway.upstream.transport import Endpoint
from tests.gateway.conftest import make_config
from tests.gateway.fakes import FakeTransport, reply

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
        apply_probe(replica, passed, error, pool.config.health)
    assert [r.healthy for r in pool.replicas] == [True, False]
    assert transport.calls["127.0.0.1:9000"] == ["GET /v2/models/digits-mlp/versions/1/ready"]

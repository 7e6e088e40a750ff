"""The balance layer: health, ejection, breakers, standby and panic decide who may be picked."""

from __future__ import annotations

import pytest

from gateway.config import GatewayConfig
from gateway.errors import NoReplicaAvailable, UpstreamFailed
from gateway.upstream.breaker import OPEN
from tests.gateway.conftest import make_config
from tests.gateway.fakes import reply
from tests.gateway.pipeline.rig import A, B, C, Rig


async def test_breakers_open_and_the_pool_answers_fast_503() -> None:
    rig = Rig(make_config(), {k: reply(503) for k in (A, B, C)})
    errors = []
    for _ in range(30):
        try:
            await rig.run()
        except (UpstreamFailed, NoReplicaAvailable) as exc:
            errors.append(exc)
    assert all(rig.replica(i).breaker.state() == OPEN for i in range(3))  # type: ignore[union-attr]
    assert isinstance(errors[-1], NoReplicaAvailable) and errors[-1].status == 503
    before = rig.transport.sent()
    with pytest.raises(NoReplicaAvailable):
        await rig.run()
    assert rig.transport.sent() == before  # no upstream call at all


async def test_consecutive_failures_eject() -> None:
    rig = Rig(make_config(replicas=4), {A: reply(500)})
    for _ in range(60):
        await rig.run()
    replica = rig.replica(0)
    assert replica.ejections >= 1
    assert rig.registry.pools["p"].outlier.is_ejected(replica) or (
        replica.breaker is not None and replica.breaker.state() == OPEN
    )


async def test_standby_only_serves_while_an_active_is_down() -> None:
    config = make_config(replicas=3)
    pools = config.model_dump()["pools"]
    pools["p"]["replicas"][2]["standby"] = True
    rig = Rig(GatewayConfig.model_validate({**config.model_dump(), "pools": pools}))
    assert {(await rig.run()).served_by for _ in range(30)} == {"r0", "r1"}
    rig.replica(0).healthy = False
    assert {(await rig.run()).served_by for _ in range(30)} == {"r1", "r2"}


async def test_unhealthy_replicas_are_avoided() -> None:
    rig = Rig(make_config(replicas=3))
    rig.replica(0).healthy = False
    assert {(await rig.run()).served_by for _ in range(30)} == {"r1", "r2"}


async def test_panic_mode_spreads_over_all_when_too_few_are_healthy() -> None:
    rig = Rig(make_config(replicas=3))
    for index in (0, 1):
        rig.replica(index).healthy = False
    assert {(await rig.run()).served_by for _ in range(30)} == {"r0", "r1", "r2"}
    assert rig.registry.snapshot()[0]["panic"]  # /admin/state shows it

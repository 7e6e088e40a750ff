"""The sampler's decisions on a real gateway's state, with scripted pages and a fake clock:
the ejected-share cap, a flapping reading, an operator's drain left alone, stale readings."""

from __future__ import annotations

import random
from typing import Any

from gateway.config import parse_config
from gateway.errors import UpstreamConnectError
from gateway.runtime import Gateway
from gateway.upstream.probes.accelerator import AcceleratorSampler
from gateway.upstream.transport.base import UpstreamResponse
from tests.gateway.fakes import FakeTransport, fail
from tests.support.clock import FakeClock

UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
INTERVAL_S = 0.5


class Pages:
    """What each replica's /metrics says now (by port), settable by the test."""

    def __init__(self) -> None:
        self.readings: dict[int, dict[str, float]] = {}

    def behaviour(self, port: int) -> Any:
        async def behave(method: str, path: str, payload: bytes) -> UpstreamResponse:
            values = {"DCGM_FI_DEV_GPU_TEMP": 60.0, "DCGM_FI_DEV_SLOWDOWN_TEMP": 90.0,
                      "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0}  # fmt: skip
            values.update(self.readings.get(port, {}))
            text = "".join(f'{k}{{gpu="0",UUID="{UUID}"}} {v}\n' for k, v in values.items())
            return UpstreamResponse(200, {}, text.encode())

        return behave


def setup(count: int, **pool: Any) -> tuple[Gateway, AcceleratorSampler, Pages, FakeClock]:
    clock = FakeClock()
    doc = {
        "pools": {"p": {"model": "m", "accelerator": {"interval_s": INTERVAL_S,
                                                      "healthy_for_s": 5.0},
                        "replicas": [{"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"}
                                     for i in range(count)], **pool}},
        "models": {"m": {"pool": "p"}},
    }  # fmt: skip
    gateway = Gateway(parse_config(doc), clock=clock)
    for replica in gateway.registry.replicas():
        replica.mark_health(True)
    pages = Pages()
    transport = FakeTransport({f"127.0.0.1:{9000 + i}": pages.behaviour(9000 + i)
                               for i in range(count)})  # fmt: skip
    sampler = AcceleratorSampler(gateway.registry, transport, clock, random.Random(0),
                                 gateway.shared, lambda pool: False)  # fmt: skip
    return gateway, sampler, pages, clock


async def tick(gateway: Gateway, sampler: AcceleratorSampler, clock: FakeClock) -> None:
    """Every replica sampled once, then the interval passes."""
    pool = gateway.registry.pools["p"]
    for replica in (*pool.replicas, *pool.draining):
        await sampler.sample(pool, replica)
    clock.advance(INTERVAL_S)


def held(gateway: Gateway) -> set[str]:
    wall = gateway.clock.wall()
    return {d.target for d in gateway.shared.decisions.known.values() if d.holds(wall)}


async def test_the_ejected_share_cap_holds_back_the_third_drain() -> None:
    gateway, sampler, pages, clock = setup(4)  # max_ejection_percent 50: two may go
    for port in (9000, 9001, 9002):
        pages.readings[port] = {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1.0}
    for _ in range(3):
        await tick(gateway, sampler, clock)
    assert held(gateway) == {"r0", "r1"}
    assert sampler.held_back["r2"].startswith("ejected-share cap: 2 of 4 already out")
    pages.readings[9000] = {}  # r0's GPU is fine again: after healthy_for_s it returns ...
    for _ in range(12):
        await tick(gateway, sampler, clock)
    assert held(gateway) == {"r1", "r2"}  # ... and r2's drain may then go ahead


async def test_a_flapping_reading_is_one_drain_and_no_restore_while_it_flaps() -> None:
    gateway, sampler, pages, clock = setup(3)
    for i in range(40):
        pages.readings[9000] = {"DCGM_FI_DEV_GPU_TEMP": 91.0 if i % 2 else 89.0}
        await tick(gateway, sampler, clock)
    decision = gateway.shared.decisions.get("replica:r0")
    assert decision is not None and decision.action == "drain" and decision.version == 1
    assert sampler.drains == {("p", "r0", "temperature"): 1}


async def test_an_operators_drain_is_never_undone() -> None:
    gateway, sampler, _, clock = setup(2)
    gateway.shared.decide("replica:r0", "drain", "alice", "disk full")
    for _ in range(20):
        await tick(gateway, sampler, clock)
    decision = gateway.shared.decisions.get("replica:r0")
    assert decision is not None and decision.by == "alice" and decision.action == "drain"


async def test_the_last_healthy_replica_stays_without_a_fallback() -> None:
    gateway, sampler, pages, clock = setup(2)
    gateway.registry.pools["p"].replicas[1].mark_health(False)
    pages.readings[9000] = {"DCGM_FI_DEV_XID_ERRORS": 79.0}
    await tick(gateway, sampler, clock)
    assert held(gateway) == set() and "last healthy replica" in sampler.held_back["r0"]


async def test_a_source_that_stops_answering_drains_nothing() -> None:
    gateway, sampler, _, clock = setup(2)
    await tick(gateway, sampler, clock)
    sampler._transport = FakeTransport(  # type: ignore[assignment]
        {f"127.0.0.1:{9000 + i}": fail(UpstreamConnectError("refused")) for i in range(2)}
    )
    for _ in range(10):
        await tick(gateway, sampler, clock)
    assert held(gateway) == set()
    snapshot = sampler.snapshot()["p"]["replicas"]
    assert {r["state"] for r in snapshot.values()} == {"unknown"}
    assert snapshot["r0"]["reading"] is None and snapshot["r0"]["error"] == "refused"

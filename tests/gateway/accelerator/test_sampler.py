"""The sampler's decisions on a real gateway's state, with scripted pages and a fake clock:
the ejected-share cap, a flapping reading, an operator's drain left alone, stale readings."""

from __future__ import annotations

import random
from typing import Any

from gateway.accelerator.sampler import REPLICA_QUERY, AcceleratorSampler
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.errors import UpstreamConnectError
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import FakeTransport, fail
from tests.support.clock import FakeClock

UUID = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"
INTERVAL_S = 0.5
HEALTHY = {
    "DCGM_FI_DEV_GPU_TEMP": 60.0,
    "DCGM_FI_DEV_SLOWDOWN_TEMP": 90.0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0,
}


class Pages:
    """What each replica's /metrics says now (by port), settable by the test."""

    def __init__(self) -> None:
        self.readings: dict[int, dict[str, float | str]] = {}  # str: "NaN", "+Inf"

    def behaviour(self, port: int) -> Any:
        async def behave(method: str, path: str, payload: bytes) -> Reply:
            values: dict[str, float | str] = dict(HEALTHY)
            values.update(self.readings.get(port, {}))
            text = "".join(f'{k}{{gpu="0",UUID="{UUID}"}} {v}\n' for k, v in values.items())
            return Reply(200, {}, text.encode())

        return behave


def setup(
    count: int, clock: FakeClock | None = None, **pool: Any
) -> tuple[Gateway, AcceleratorSampler, Pages, FakeClock]:
    clock = clock or FakeClock()
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
    sampler._transport = FakeTransport(
        {f"127.0.0.1:{9000 + i}": fail(UpstreamConnectError("refused")) for i in range(2)}
    )
    for _ in range(10):
        await tick(gateway, sampler, clock)
    assert held(gateway) == set()
    snapshot = sampler.snapshot()["p"]["replicas"]
    assert {r["state"] for r in snapshot.values()} == {"unknown"}
    assert snapshot["r0"]["reading"] is None and snapshot["r0"]["error"] == "refused"


def node_page(temperatures: dict[str, float]) -> Any:
    """A dcgm-exporter page of one node: a temperature series per GPU (by UUID)."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        text = "".join(
            f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i}",UUID="{uuid}"}} {t}\n'
            f'DCGM_FI_DEV_SLOWDOWN_TEMP{{gpu="{i}",UUID="{uuid}"}} 90\n'
            for i, (uuid, t) in enumerate(temperatures.items())
        )
        return Reply(200, {}, text.encode())

    return behave


async def test_replicas_on_one_exporter_share_one_read_per_sample() -> None:
    clock = FakeClock()
    uuids = [f"GPU-{i}{UUID[5:]}" for i in range(3)]
    exporters = {f"r{i}": {"url": "http://127.0.0.1:9400", "uuid": uuids[i]} for i in range(3)}
    doc = {
        "pools": {"p": {"model": "m",
                        "accelerator": {"interval_s": INTERVAL_S, "exporters": exporters},
                        "replicas": [{"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"}
                                     for i in range(4)]}},
        "models": {"m": {"pool": "p"}},
    }  # fmt: skip
    gateway = Gateway(parse_config(doc), clock=clock)
    temperatures = {uuids[0]: 61.0, uuids[1]: 62.0, uuids[2]: 63.0}
    transport = FakeTransport({"127.0.0.1:9400": node_page(temperatures),
                               "127.0.0.1:9003": Pages().behaviour(9003)})  # fmt: skip
    sampler = AcceleratorSampler(gateway.registry, transport, clock, random.Random(0),
                                 gateway.shared, lambda pool: False)  # fmt: skip
    loops = sampler.loops()
    for _, loop in loops:
        loop.close()  # only their names and members are looked at here
    assert sorted(name for name, _ in loops) == [
        "accelerator:p:http://127.0.0.1:9003" + REPLICA_QUERY,
        "accelerator:p:http://127.0.0.1:9400/metrics",
    ]
    pool = gateway.registry.pools["p"]
    key = next(iter(sampler._members))
    await sampler._sample_source(pool, sampler._members[key])
    assert transport.calls["127.0.0.1:9400"] == ["GET /metrics"]  # one read for three
    snapshot = sampler.snapshot()["p"]["replicas"]
    assert {r: snapshot[r]["reading"]["temperature_c"] for r in ("r0", "r1", "r2")} == {
        "r0": 61.0,
        "r1": 62.0,
        "r2": 63.0,
    }
    assert {r: snapshot[r]["reading"]["uuid"] for r in ("r0", "r1", "r2")} == {
        f"r{i}": uuids[i] for i in range(3)
    }


async def test_a_loop_per_source_follows_replicas_that_join_and_leave() -> None:
    gateway, sampler, _, _ = setup(2)
    pool = gateway.registry.pools["p"]
    sampler.start()
    try:
        assert set(sampler._tasks) == {
            f"accelerator:p:http://127.0.0.1:{9000 + i}{REPLICA_QUERY}" for i in range(2)
        }
        first = pool.replicas[0]
        sampler.left(pool, first)
        assert set(sampler._tasks) == {f"accelerator:p:http://127.0.0.1:9001{REPLICA_QUERY}"}
        assert "r0" not in sampler.states
        sampler.joined(pool, first)
        assert len(sampler._tasks) == 2
    finally:
        await sampler.stop()
    assert sampler._tasks == {} and sampler._members == {}


async def test_a_page_of_one_gpu_is_read_on_the_loop_and_a_larger_one_in_the_thread() -> None:
    gateway, sampler, pages, clock = setup(2)
    for i in range(3):
        # a new page every tick
        pages.readings[9000] = {"DCGM_FI_DEV_GPU_TEMP": 60.0 + i}
        await tick(gateway, sampler, clock)
    # no thread started for pages this small
    assert sampler._parsing is None
    assert sampler.snapshot()["p"]["replicas"]["r0"]["reading"]["temperature_c"] == 62.0
    padding = "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).\n" * 100
    pages.readings[9000] = {"DCGM_FI_DEV_GPU_TEMP": 70.0}
    pool = gateway.registry.pools["p"]
    big = Pages.behaviour(pages, 9000)

    async def padded(method: str, path: str, payload: bytes) -> Reply:
        reply = await big(method, path, payload)
        return Reply(200, {}, padding.encode() + reply.body)

    sampler._transport = FakeTransport({"127.0.0.1:9000": padded})
    await sampler.sample(pool, pool.replicas[0])
    # over INLINE_PAGE_BYTES: parsed off the loop
    assert sampler._parsing is not None
    assert sampler.snapshot()["p"]["replicas"]["r0"]["reading"]["temperature_c"] == 70.0
    await sampler.stop()

"""DNS discovery's membership logic on a fake resolver and a fake clock: what joins, what
drains and when it leaves, what a failed or empty answer leaves alone."""

from __future__ import annotations

import asyncio
import logging
import random
import re
from typing import Any

import pytest

from gateway.config.discovery import DiscoveryConfig
from gateway.config.loader import ConfigError, parse_config
from gateway.config.models import GatewayConfig
from gateway.upstream.discovery.dns import Answer, ResolutionFailed, Target
from gateway.upstream.discovery.watch import (
    DiscoveryService,
    PoolDiscovery,
    plan,
    replica_configs,
    replica_id,
    screen,
)
from gateway.upstream.eligibility import eligible
from gateway.upstream.probes.health import HealthProber
from gateway.upstream.registry import Pool, Registry
from gateway.upstream.replica import Replica
from tests.gateway.fakes import FakeTransport
from tests.support.clock import FakeClock

A, B, C = Target("10.0.0.1", 8000), Target("10.0.0.2", 8000), Target("10.0.0.3", 8000)


class FakeResolver:
    """Answers what the test last set; an exception instance is raised instead."""

    def __init__(self, answer: list[Target] | ResolutionFailed) -> None:
        self.answer = answer
        self.asked = 0

    async def resolve(self, config: DiscoveryConfig) -> Answer:
        self.asked += 1
        if isinstance(self.answer, ResolutionFailed):
            raise self.answer
        return Answer(tuple(self.answer))


def discovery_config(**discovery: Any) -> GatewayConfig:
    pool: dict[str, Any] = {"model": "digits-mlp", "version": "1"}
    pool["discovery"] = {"dns": "digits.test", "port": 8000, **discovery}
    return parse_config({"pools": {"p": pool}, "models": {"digits": {"pool": "p"}}})


def rig(
    answer: list[Target] | ResolutionFailed, **discovery: Any
) -> tuple[Registry, PoolDiscovery, FakeResolver, FakeClock]:
    clock = FakeClock()
    registry = Registry(discovery_config(**discovery), clock)
    pool = registry.pools["p"]
    assert pool.config.discovery is not None
    resolver = FakeResolver(answer)
    return registry, PoolDiscovery(registry, pool, pool.config.discovery, resolver, clock), \
        resolver, clock  # fmt: skip


def ids(registry: Registry) -> list[str]:
    return [r.id for r in registry.pools["p"].replicas]


def by_host(pool: Pool, host: str) -> Replica:
    """The member at ``host`` (ids say nothing of it)."""
    return next(r for r in pool.replicas if r.endpoint.host == host)


async def yields(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_plan_adds_the_new_and_removes_the_gone() -> None:
    change = plan(["a", "b"], ["b", "c"], allow_empty=False)
    assert (change.add, change.remove) == (("c",), ("a",))
    assert not plan(["a"], ["a"], allow_empty=False)


def test_an_empty_answer_removes_nothing_unless_allowed() -> None:
    assert not plan(["a", "b"], [], allow_empty=False)
    assert plan(["a", "b"], [], allow_empty=True).remove == ("a", "b")


def rid(host: str, port: int) -> str:
    """The id discovery gives the replica at ``host:port`` in pool ``p``."""
    return replica_id("p", Target(host, port))


def test_replicas_are_named_and_addressed_deterministically() -> None:
    config = DiscoveryConfig(dns="x", port=8000, zone="z1")
    v6 = Target("fd00::1", 9000)
    replicas = replica_configs("p", [A, v6], config, "https")
    a_id, v6_id = replica_id("p", A), replica_id("p", v6)
    assert sorted(replicas) == sorted([a_id, v6_id])
    assert replicas[a_id].url == "https://10.0.0.1:8000"
    assert replicas[v6_id].url == "https://[fd00::1]:9000"
    assert replicas[a_id].zone == "z1"
    # the same name on every gateway, and no address in it (ids reach clients)
    assert replica_id("p", Target("10.0.0.1", 8000)) == a_id
    assert re.fullmatch(r"p-[0-9a-f]{10}", a_id) and re.fullmatch(r"p-[0-9a-f]{10}", v6_id)
    assert "10.0.0.1" not in a_id and "8000" not in a_id and "fd00" not in v6_id
    assert replica_id("p", Target("10.0.0.1", 8001)) != a_id != replica_id("q", A)


def test_a_pool_has_exactly_one_of_replicas_and_discovery() -> None:
    both: dict[str, Any] = {
        "model": "m",
        "replicas": [{"id": "r", "url": "http://127.0.0.1:1"}],
        "discovery": {"dns": "x", "port": 1},
    }
    for pool in (both, {"model": "m"}):
        with pytest.raises(ConfigError, match="exactly one"):
            parse_config({"pools": {"p": pool}, "models": {"m": {"pool": "p"}}})


def test_a_and_aaaa_need_a_port_srv_must_not_name_one() -> None:
    with pytest.raises(ValueError, match="set the replicas' port"):
        DiscoveryConfig(dns="x", record="A")
    with pytest.raises(ValueError, match="SRV records carry"):
        DiscoveryConfig(dns="x", record="SRV", port=1)
    assert DiscoveryConfig(dns="x", record="SRV", nameserver="[::1]:5353").nameserver_address() \
        == ("::1", 5353)  # fmt: skip
    assert DiscoveryConfig(dns="x", port=1, nameserver="10.0.0.10").nameserver_address() == (
        "10.0.0.10",
        53,
    )
    with pytest.raises(ValueError, match="host\\[:port\\]"):
        DiscoveryConfig(dns="x", port=1, nameserver="h:notaport")


async def test_new_replicas_join_held_out_until_probed() -> None:
    registry, discovery, _, _ = rig([A, B])
    change = await discovery.refresh()
    assert change.add == tuple(sorted((rid("10.0.0.1", 8000), rid("10.0.0.2", 8000))))
    pool = registry.pools["p"]
    assert ids(registry) == list(change.add)
    assert [r.healthy for r in pool.replicas] == [False, False]
    assert by_host(pool, "10.0.0.1").url == "http://10.0.0.1:8000"
    assert by_host(pool, "10.0.0.1").breaker is not None


async def test_a_removed_replica_drains_then_leaves() -> None:
    registry, discovery, resolver, clock = rig([A, B])
    await discovery.refresh()
    pool = registry.pools["p"]
    for replica in pool.replicas:
        replica.mark_health(True)
    gone = by_host(pool, "10.0.0.1")
    gone.started()  # one attempt in flight
    resolver.answer = [B]
    assert (await discovery.refresh()).remove == (gone.id,)
    assert ids(registry) == [rid("10.0.0.2", 8000)]
    assert [r.id for r in eligible(pool, set(), clock.now())] == [rid("10.0.0.2", 8000)]
    await yields()
    assert pool.draining == (gone,)  # still finishing its attempt
    gone.finished(0.01, None)
    await yields()
    assert not pool.draining
    assert registry.replica(gone.id) is None


async def test_a_drain_is_bounded_in_time() -> None:
    registry, discovery, resolver, clock = rig([A, B], drain_timeout_s=1.0)
    await discovery.refresh()
    pool = registry.pools["p"]
    hung = by_host(pool, "10.0.0.1")
    hung.started()
    resolver.answer = [B]
    start = clock.now()
    await discovery.refresh()
    while pool.draining:
        await yields(1)
    assert 1.0 <= clock.now() - start < 1.2


async def test_a_draining_replica_that_comes_back_rejoins_as_it_was() -> None:
    registry, discovery, resolver, _ = rig([A, B])
    await discovery.refresh()
    pool = registry.pools["p"]
    first = by_host(pool, "10.0.0.1")
    first.mark_health(True)
    first.started()
    resolver.answer = [B]
    await discovery.refresh()
    resolver.answer = [A, B]
    await discovery.refresh()
    first.finished(0.01, None)
    await yields()
    assert pool.replicas[-1] is first and first.healthy is True
    assert pool.draining == ()


async def test_a_failure_keeps_the_last_set_and_warns_once(caplog: Any) -> None:
    registry, discovery, resolver, _ = rig([A])
    await discovery.refresh()
    resolver.answer = ResolutionFailed("timeout")
    with caplog.at_level(logging.WARNING, logger="gateway.upstream.discovery.watch"):
        for _ in range(3):
            assert not await discovery.refresh()
        resolver.answer = [A]
        await discovery.refresh()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("failed" in m for m in messages) == 1
    assert sum("works again" in m for m in messages) == 1
    assert ids(registry) == [rid("10.0.0.1", 8000)]


async def test_an_empty_answer_keeps_the_last_replicas() -> None:
    registry, discovery, resolver, _ = rig([A])
    await discovery.refresh()
    resolver.answer = []
    await discovery.refresh()
    assert ids(registry) == [rid("10.0.0.1", 8000)]


async def test_an_empty_answer_drains_all_when_allowed() -> None:
    registry, discovery, resolver, _ = rig([A], allow_empty=True)
    await discovery.refresh()
    resolver.answer = []
    await discovery.refresh()
    await yields()
    assert ids(registry) == [] and registry.pools["p"].draining == ()


async def test_the_service_resolves_at_start_and_again_each_interval() -> None:
    clock = FakeClock()
    registry = Registry(discovery_config(interval_s=5), clock)
    resolver = FakeResolver([A])
    service = DiscoveryService(registry, clock, lambda _: resolver)
    service.start()
    await yields()
    assert ids(registry) == [rid("10.0.0.1", 8000)]
    resolver.answer = [A, C]
    await yields()
    assert resolver.asked >= 2 and clock.slept[:1] == [5]
    assert ids(registry) == [rid("10.0.0.1", 8000), rid("10.0.0.3", 8000)]
    await service.stop()


async def test_the_health_prober_probes_joiners_and_stops_on_leavers() -> None:
    clock = FakeClock()
    registry = Registry(discovery_config(), clock)
    pool = registry.pools["p"]
    prober = HealthProber(registry, FakeTransport(), clock, random.Random(0))
    prober.start()
    replica = registry.add(pool, replica_configs("p", [A], DiscoveryConfig(dns="x", port=1),
                                                 "http")[replica_id("p", A)])  # fmt: skip
    await yields()
    assert replica.healthy is True  # the first probe decides: joined at once
    assert f"probe:{replica.id}" in prober._tasks
    assert registry.drain(pool, replica.id) is replica
    assert registry.release(pool, replica)
    assert f"probe:{replica.id}" not in prober._tasks
    await prober.stop()


def test_srv_priorities_make_the_lowest_the_actives_and_the_rest_standby() -> None:
    targets = [Target("10.0.0.1", 8000, 10), Target("10.0.0.2", 8000, 10),
               Target("10.0.0.3", 8000, 20)]  # fmt: skip
    configs = replica_configs("p", targets, DiscoveryConfig(dns="x", record="SRV"), "http")
    assert {rid: c.standby for rid, c in configs.items()} == {
        rid("10.0.0.1", 8000): False, rid("10.0.0.2", 8000): False, rid("10.0.0.3", 8000): True,
    }  # fmt: skip
    alone = replica_configs("p", targets[2:], DiscoveryConfig(dns="x", record="SRV"), "http")
    assert [c.standby for c in alone.values()] == [False]  # the lowest present is active


async def test_a_priority_change_moves_a_member_between_active_and_standby() -> None:
    primary, backup = Target("10.0.0.1", 8000, 0), Target("10.0.0.2", 8000, 1)
    registry, discovery, resolver, clock = rig([primary, backup], record="SRV", port=None)
    pool = registry.pools["p"]
    await discovery.refresh()
    standby = {r.id: r.standby for r in pool.replicas}
    assert standby == {rid("10.0.0.1", 8000): False, rid("10.0.0.2", 8000): True}
    for replica in pool.replicas:
        replica.mark_health(True)
    assert [r.id for r in eligible(pool, set(), clock.now())] == [rid("10.0.0.1", 8000)]

    resolver.answer = [Target("10.0.0.1", 8000, 1), Target("10.0.0.2", 8000, 0)]  # swapped
    change = await discovery.refresh()
    assert not change  # nobody joined or left: the same members, roles swapped
    assert [r.id for r in eligible(pool, set(), clock.now())] == [rid("10.0.0.2", 8000)]


async def test_members_are_capped_best_priorities_and_members_first_logged_once(
    caplog: Any,
) -> None:
    flood = [Target(f"10.1.{i // 256}.{i % 256}", 8000, 5) for i in range(3900)]
    best = [Target("10.9.0.1", 8000, 1), Target("10.9.0.2", 8000, 1)]
    registry, discovery, resolver, _ = rig([*flood, *best], max_members=4, record="SRV",
                                           port=None)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="gateway.upstream.discovery.watch"):
        await discovery.refresh()
        first = ids(registry)
        kept = ("10.1.0.0", "10.1.0.1", "10.9.0.1", "10.9.0.2")
        assert sorted(first) == sorted(rid(host, 8000) for host in kept)
        resolver.answer = [*reversed(flood), *best, Target("10.0.0.0", 8000, 5)]
        await discovery.refresh()  # a lower address joined the answer: the members stay
        assert ids(registry) == first
        status = registry.snapshot()[0]["discovery"]
        assert (status["max_members"], status["over_cap"]) == (4, 3899)
        resolver.answer = best
        await discovery.refresh()  # within the cap again
        resolver.answer = [*flood, *best]
        await discovery.refresh()  # over it again: a new spell, logged again
    capped = [r.getMessage() for r in caplog.records if "max_members (4)" in r.getMessage()]
    assert len(capped) == 2 and "3898 more replica(s)" in capped[0]
    assert registry.snapshot()[0]["size"] == 4


@pytest.mark.parametrize(
    ("host", "port", "reason"),
    [
        ("0.0.0.0", 8000, "unspecified"),
        ("::", 8000, "unspecified"),
        ("255.255.255.255", 8000, "broadcast"),
        ("224.0.0.1", 8000, "multicast"),
        ("ff02::1", 8000, "multicast"),
        ("::ffff:0.0.0.0", 8000, "unspecified"),
        ("240.0.0.7", 8000, "reserved"),
        ("10.0.0.1", 0, "port 0"),
    ],
)
def test_addresses_no_replica_can_have_are_dropped(host: str, port: int, reason: str) -> None:
    kept, dropped = screen([Target(host, port), Target("127.0.0.1", 8000), Target("::1", 8000)])
    assert kept == [Target("127.0.0.1", 8000), Target("::1", 8000)]  # loopback: a sidecar
    assert len(dropped) == 1 and reason in dropped[0].reason
    assert dropped[0].address.endswith(f":{port}")


async def test_dropped_addresses_are_logged_when_they_change_and_shown(caplog: Any) -> None:
    bad = [Target("0.0.0.0", 8000), Target("224.0.0.1", 8000)]
    registry, discovery, resolver, _ = rig([A, *bad])
    with caplog.at_level(logging.WARNING, logger="gateway.upstream.discovery.watch"):
        for _ in range(3):
            await discovery.refresh()
        resolver.answer = [A, Target("10.0.0.1", 0, 0)]
        await discovery.refresh()
    assert ids(registry) == [rid("10.0.0.1", 8000)]
    lines = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(lines) == 2, lines
    assert "0.0.0.0:8000: the unspecified address" in lines[0]
    assert "224.0.0.1:8000: a multicast address" in lines[0]
    status = registry.snapshot()[0]["discovery"]
    assert status["dropped"] == [{"address": "10.0.0.1:0",
                                  "reason": "port 0 (in SRV: no such service here)"}]  # fmt: skip
    assert (status["answered"], status["dropped_count"], status["last_error"]) == (2, 1, None)
    resolver.answer = ResolutionFailed("timeout")
    await discovery.refresh()
    assert registry.snapshot()[0]["discovery"]["last_error"] == "timeout"


def test_max_members_is_bounded() -> None:
    assert DiscoveryConfig(dns="x", port=1).max_members == 32
    with pytest.raises(ValueError, match="max_members"):
        DiscoveryConfig(dns="x", port=1, max_members=0)

"""The DNS resolvers against a real DNS server on loopback (dnslib) and the system resolver."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from dnslib import RR

from gateway.config.discovery import DiscoveryConfig
from gateway.config.loader import parse_config
from gateway.upstream.discovery.dns import (
    MAX_ANSWER_BYTES,
    Dropped,
    NameserverResolver,
    ResolutionFailed,
    Resolver,
    SystemResolver,
    Target,
    resolver_for,
    system_nameserver,
)
from gateway.upstream.discovery.watch import PoolDiscovery
from gateway.upstream.registry import Registry
from tests.support.clock import FakeClock
from tests.support.dns_server import ChangingResolver, dns_server


@pytest.fixture
def dns() -> Iterator[tuple[ChangingResolver, NameserverResolver]]:
    with dns_server() as (records, port):
        yield records, NameserverResolver(("127.0.0.1", port))


async def targets(resolver: Resolver, config: DiscoveryConfig) -> list[Target]:
    return list((await resolver.resolve(config)).targets)


def a_config(**extra: object) -> DiscoveryConfig:
    return DiscoveryConfig.model_validate({"dns": "digits.test", "port": 8000, **extra})


async def test_a_records_become_targets_on_the_pool_port(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    two = ["digits.test. 5 IN A 10.0.0.2", "digits.test. 5 IN A 10.0.0.1"]
    records.set("digits.test", "A", two)
    both = [Target("10.0.0.1", 8000), Target("10.0.0.2", 8000)]
    assert await targets(resolver, a_config()) == both
    records.set("digits.test", "A", ["digits.test. 5 IN A 10.0.0.3"])
    assert await targets(resolver, a_config()) == [Target("10.0.0.3", 8000)]


async def test_aaaa_records(dns: tuple[ChangingResolver, NameserverResolver]) -> None:
    records, resolver = dns
    records.set("digits.test", "AAAA", ["digits.test. 5 IN AAAA fd00::1"])
    assert await targets(resolver, a_config(record="AAAA")) == [Target("fd00::1", 8000)]


async def test_srv_records_carry_ports_and_targets_resolve_from_the_additional_section(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set(
        "_http._tcp.digits.test",
        "SRV",
        [
            "_http._tcp.digits.test. 5 IN SRV 0 50 9001 a.digits.test.",
            "_http._tcp.digits.test. 5 IN SRV 0 50 9002 b.digits.test.",
        ],
    )
    records.set("a.digits.test", "A", ["a.digits.test. 5 IN A 127.0.0.1"])
    records.set("b.digits.test", "A", ["b.digits.test. 5 IN A 127.0.0.2"])
    config = DiscoveryConfig(dns="_http._tcp.digits.test", record="SRV")
    assert await targets(resolver, config) == [Target("127.0.0.1", 9001), Target("127.0.0.2", 9002)]


async def test_srv_priorities_are_kept_and_an_address_named_twice_takes_its_best(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set(
        "_http._tcp.digits.test",
        "SRV",
        [
            "_http._tcp.digits.test. 5 IN SRV 10 50 9001 a.digits.test.",
            "_http._tcp.digits.test. 5 IN SRV 20 50 9002 b.digits.test.",
            "_http._tcp.digits.test. 5 IN SRV 30 50 9001 a.digits.test.",
        ],
    )
    records.set("a.digits.test", "A", ["a.digits.test. 5 IN A 127.0.0.1"])
    records.set("b.digits.test", "A", ["b.digits.test. 5 IN A 127.0.0.2"])
    config = DiscoveryConfig(dns="_http._tcp.digits.test", record="SRV")
    found = await targets(resolver, config)
    assert [(t.host, t.port, t.priority) for t in found] == [
        ("127.0.0.1", 9001, 10),
        ("127.0.0.2", 9002, 20),
    ]


async def test_srv_targets_missing_from_the_additional_section_are_asked_for(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set("_x._tcp.t", "SRV", ["_x._tcp.t. 5 IN SRV 0 0 9001 elsewhere.other."])
    records.set("elsewhere.other", "A", [])  # the server adds no additional records for it
    config = DiscoveryConfig(dns="_x._tcp.t", record="SRV")
    assert await targets(resolver, config) == []  # asked, and it has no address
    records.set("elsewhere.other", "A", ["elsewhere.other. 5 IN A 10.1.1.1"])
    records.set("_x._tcp.t", "SRV", ["_x._tcp.t. 5 IN SRV 0 0 9001 elsewhere.other."])
    assert await targets(resolver, config) == [Target("10.1.1.1", 9001)]


async def test_nxdomain_is_an_empty_answer_servfail_a_failure(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    assert await targets(resolver, a_config(dns="nothing.test")) == []
    records.fail = True
    with pytest.raises(ResolutionFailed, match="SERVFAIL"):
        await resolver.resolve(a_config())


async def test_a_nameserver_that_never_answers_times_out() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as mute:
        mute.bind(("127.0.0.1", 0))
        resolver = NameserverResolver(mute.getsockname())
        with pytest.raises(ResolutionFailed, match=r"no answer in 0\.2 s"):
            await resolver.resolve(a_config(timeout_s=0.2))


async def test_the_system_resolver_reads_hosts() -> None:
    resolver = SystemResolver()
    assert await targets(resolver, a_config(dns="localhost")) == [Target("127.0.0.1", 8000)]


def test_which_resolver(tmp_path: Path) -> None:
    assert isinstance(resolver_for(a_config()), SystemResolver)
    assert isinstance(resolver_for(a_config(nameserver="127.0.0.1:53")), NameserverResolver)
    srv = resolver_for(DiscoveryConfig(dns="x", record="SRV"))
    assert isinstance(srv, NameserverResolver) and srv.nameserver is None
    conf = tmp_path / "resolv.conf"
    conf.write_text("search svc.cluster.local\nnameserver 10.96.0.10\nnameserver 8.8.8.8\n")
    assert system_nameserver(conf) == ("10.96.0.10", 53)
    conf.write_text("search x\n")
    with pytest.raises(ResolutionFailed, match="none in"):
        system_nameserver(conf)


async def test_only_the_asked_name_and_its_cname_chain_count(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set(
        "digits.test",
        "A",
        [
            "digits.test. 5 IN CNAME pods.digits.test.",
            "pods.digits.test. 5 IN A 10.0.0.9",
            "evil.test. 5 IN A 10.6.6.6",
        ],
    )
    records.additional = RR.fromZone("other.test. 5 IN A 10.7.7.7")
    answer = await resolver.resolve(a_config())
    assert answer.targets == (Target("10.0.0.9", 8000),)
    assert answer.dropped == (
        Dropped("10.6.6.6", "a record of evil.test, not of digits.test"),
        Dropped("10.7.7.7", "a record of other.test, not of digits.test"),
    )


async def test_an_answer_over_the_size_bound_is_a_failure(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    flood = [f"digits.test. 5 IN A 10.0.{i // 256}.{i % 256}" for i in range(3900)]
    records.set("digits.test", "A", flood)  # 62 KB in one datagram: no nameserver sends that
    too_long = f"an answer of 62... bytes, over {MAX_ANSWER_BYTES}"
    with pytest.raises(ResolutionFailed, match=too_long):
        await resolver.resolve(a_config())
    records.set("digits.test", "A", flood[:200])  # 3.2 KB: taken (and capped by discovery)
    assert len((await resolver.resolve(a_config())).targets) == 200


async def test_srv_follow_up_queries_are_bounded_by_the_cap(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set(
        "_x._tcp.t", "SRV", [f"_x._tcp.t. 5 IN SRV {i % 3} 0 9000 n{i}.other." for i in range(30)]
    )
    for i in range(30):
        records.set(f"n{i}.other", "A", [])  # exists, not in the additional section
    asked = records.queries
    await resolver.resolve(DiscoveryConfig(dns="_x._tcp.t", record="SRV", max_members=4))
    assert records.queries - asked == 1 + 4


async def test_hostile_answers_through_discovery_make_only_usable_capped_members(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    """A real nameserver's SRV answer with every kind of address no replica can have, an
    unrelated name's record, and more targets than the cap: the pool gets the usable ones, at
    most ``max_members``, and /admin/state says what was left out and why."""
    records, resolver = dns
    srv = [
        "_v2._tcp.digits.test. 5 IN SRV 0 0 0 zero.digits.test.",  # port 0: today it was :80
        "_v2._tcp.digits.test. 5 IN SRV 0 0 9000 any.digits.test.",
        "_v2._tcp.digits.test. 5 IN SRV 0 0 9000 multi.digits.test.",
        "_v2._tcp.digits.test. 5 IN SRV 0 0 9000 bcast.digits.test.",
        *(f"_v2._tcp.digits.test. 5 IN SRV 1 0 {9001 + i} ok{i}.digits.test." for i in range(10)),
    ]
    records.set("_v2._tcp.digits.test", "SRV", srv)
    for name, address in (
        ("zero", "127.0.0.1"),
        ("any", "0.0.0.0"),
        ("multi", "239.1.2.3"),
        ("bcast", "255.255.255.255"),
    ):
        records.set(f"{name}.digits.test", "A", [f"{name}.digits.test. 5 IN A {address}"])
    for i in range(10):
        records.set(f"ok{i}.digits.test", "A", [f"ok{i}.digits.test. 5 IN A 127.0.0.{i + 1}"])
    records.additional = RR.fromZone("elsewhere.test. 5 IN A 10.6.6.6")
    clock = FakeClock()
    config = parse_config(
        {
            "pools": {
                "p": {
                    "model": "m",
                    "discovery": {"dns": "_v2._tcp.digits.test", "record": "SRV", "max_members": 3},
                }
            },
            "models": {"m": {"pool": "p"}},
        }
    )
    registry = Registry(config, clock)
    pool = registry.pools["p"]
    assert pool.config.discovery is not None
    await PoolDiscovery(registry, pool, pool.config.discovery, resolver, clock).refresh()
    assert sorted(r.url for r in pool.replicas) == [
        "http://127.0.0.1:9001",
        "http://127.0.0.2:9002",
        "http://127.0.0.3:9003",
    ]
    status = registry.snapshot()[0]["discovery"]
    assert status["over_cap"] == 7 and status["dropped_count"] == 5
    assert {d["address"]: d["reason"] for d in status["dropped"]} == {
        "10.6.6.6": "a record of elsewhere.test, not of _v2._tcp.digits.test",
        "127.0.0.1:0": "port 0 (in SRV: no such service here)",
        "0.0.0.0:9000": "the unspecified address",
        "239.1.2.3:9000": "a multicast address",
        "255.255.255.255:9000": "the broadcast address",
    }

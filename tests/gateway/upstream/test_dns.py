"""The DNS resolvers against a real DNS server on loopback (dnslib) and the system resolver."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.config.discovery import DiscoveryConfig
from gateway.upstream.dns import (
    NameserverResolver,
    ResolutionFailed,
    SystemResolver,
    Target,
    resolver_for,
    system_nameserver,
)
from tests.support.dns_server import ChangingResolver, dns_server


@pytest.fixture
def dns() -> Iterator[tuple[ChangingResolver, NameserverResolver]]:
    with dns_server() as (records, port):
        yield records, NameserverResolver(("127.0.0.1", port))


def a_config(**extra: object) -> DiscoveryConfig:
    return DiscoveryConfig.model_validate({"dns": "digits.test", "port": 8000, **extra})


async def test_a_records_become_targets_on_the_pool_port(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    two = ["digits.test. 5 IN A 10.0.0.2", "digits.test. 5 IN A 10.0.0.1"]
    records.set("digits.test", "A", two)
    both = [Target("10.0.0.1", 8000), Target("10.0.0.2", 8000)]
    assert await resolver.resolve(a_config()) == both
    records.set("digits.test", "A", ["digits.test. 5 IN A 10.0.0.3"])
    assert await resolver.resolve(a_config()) == [Target("10.0.0.3", 8000)]


async def test_aaaa_records(dns: tuple[ChangingResolver, NameserverResolver]) -> None:
    records, resolver = dns
    records.set("digits.test", "AAAA", ["digits.test. 5 IN AAAA fd00::1"])
    assert await resolver.resolve(a_config(record="AAAA")) == [Target("fd00::1", 8000)]


async def test_srv_records_carry_ports_and_targets_resolve_from_the_additional_section(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set("_http._tcp.digits.test", "SRV", [
        "_http._tcp.digits.test. 5 IN SRV 0 50 9001 a.digits.test.",
        "_http._tcp.digits.test. 5 IN SRV 0 50 9002 b.digits.test.",
    ])  # fmt: skip
    records.set("a.digits.test", "A", ["a.digits.test. 5 IN A 127.0.0.1"])
    records.set("b.digits.test", "A", ["b.digits.test. 5 IN A 127.0.0.2"])
    config = DiscoveryConfig(dns="_http._tcp.digits.test", record="SRV")
    assert await resolver.resolve(config) == [Target("127.0.0.1", 9001), Target("127.0.0.2", 9002)]


async def test_srv_priorities_are_kept_and_an_address_named_twice_takes_its_best(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    records.set("_http._tcp.digits.test", "SRV", [
        "_http._tcp.digits.test. 5 IN SRV 10 50 9001 a.digits.test.",
        "_http._tcp.digits.test. 5 IN SRV 20 50 9002 b.digits.test.",
        "_http._tcp.digits.test. 5 IN SRV 30 50 9001 a.digits.test.",
    ])  # fmt: skip
    records.set("a.digits.test", "A", ["a.digits.test. 5 IN A 127.0.0.1"])
    records.set("b.digits.test", "A", ["b.digits.test. 5 IN A 127.0.0.2"])
    config = DiscoveryConfig(dns="_http._tcp.digits.test", record="SRV")
    found = await resolver.resolve(config)
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
    assert await resolver.resolve(config) == []  # asked, and it has no address
    records.set("elsewhere.other", "A", ["elsewhere.other. 5 IN A 10.1.1.1"])
    records.set("_x._tcp.t", "SRV", ["_x._tcp.t. 5 IN SRV 0 0 9001 elsewhere.other."])
    assert await resolver.resolve(config) == [Target("10.1.1.1", 9001)]


async def test_nxdomain_is_an_empty_answer_servfail_a_failure(
    dns: tuple[ChangingResolver, NameserverResolver],
) -> None:
    records, resolver = dns
    assert await resolver.resolve(a_config(dns="nothing.test")) == []
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
    assert await resolver.resolve(a_config(dns="localhost")) == [Target("127.0.0.1", 8000)]


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

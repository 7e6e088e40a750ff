"""DNS look-ups for discovery, off the event loop's critical path: what a name points at now.

Two resolvers behind one small protocol (`Resolver`), so discovery's tests put a fake in
their place. `NameserverResolver` asks one nameserver over UDP with dnslib's packet codec on an
asyncio datagram endpoint (SRV needs a real query; no thread, a timeout per query);
`SystemResolver` uses ``loop.getaddrinfo`` (a thread; honours /etc/hosts and search domains)
for A/AAAA. No TCP fallback: a truncated answer is a failure (a pool's answer fits in 512
bytes up to ~30 A records; use SRV with a nameserver that trims, or fewer pods, beyond).
dnslib's exceptions and socket errors become `ResolutionFailed` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dnslib import QTYPE, RCODE, DNSError, DNSRecord

from gateway.config.discovery import DiscoveryConfig, split_nameserver

RESOLV_CONF = Path("/etc/resolv.conf")


class ResolutionFailed(Exception):
    """The name could not be resolved now (timeout, SERVFAIL, unreachable nameserver...)."""


@dataclass(frozen=True, slots=True, order=True)
class Target:
    """One address a replica listens on; ``priority``: its SRV record's (lower is preferred;
    0 for A/AAAA answers)."""

    host: str  # an IP address
    port: int
    priority: int = 0


class Resolver(Protocol):
    async def resolve(self, config: DiscoveryConfig) -> list[Target]:
        """The targets ``config.dns`` names now ([] if none); raises `ResolutionFailed`."""
        ...


def resolver_for(config: DiscoveryConfig) -> Resolver:
    """A/AAAA without a nameserver: the system's; otherwise that nameserver, queried directly."""
    address = config.nameserver_address()
    if address is None and config.record != "SRV":
        return SystemResolver()
    return NameserverResolver(address)


def system_nameserver(resolv_conf: Path = RESOLV_CONF) -> tuple[str, int]:
    """The first ``nameserver`` line of /etc/resolv.conf (what the system resolver asks)."""
    try:
        lines = resolv_conf.read_text().splitlines()
    except OSError as exc:
        raise ResolutionFailed(f"no nameserver configured and {resolv_conf}: {exc}") from exc
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            return split_nameserver(fields[1])
    raise ResolutionFailed(f"no nameserver configured and none in {resolv_conf}")


class SystemResolver:
    async def resolve(self, config: DiscoveryConfig) -> list[Target]:
        family = socket.AF_INET6 if config.record == "AAAA" else socket.AF_INET
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(config.timeout_s):
                infos = await loop.getaddrinfo(config.dns, config.port, family=family,
                                               type=socket.SOCK_STREAM)  # fmt: skip
        except socket.gaierror as exc:
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                return []  # no such name or no address: an empty answer, not a failure
            raise ResolutionFailed(f"{config.dns}: {exc.strerror}") from exc
        except (OSError, TimeoutError) as exc:
            raise ResolutionFailed(f"{config.dns}: {exc!r}") from exc
        return sorted({Target(str(info[4][0]), int(info[4][1])) for info in infos})


class NameserverResolver:
    def __init__(self, nameserver: tuple[str, int] | None) -> None:
        self.nameserver = nameserver  # None: the first of /etc/resolv.conf, read per query

    async def resolve(self, config: DiscoveryConfig) -> list[Target]:
        reply = await self.query(config.dns, config.record, config.timeout_s)
        if config.record != "SRV":
            port = config.port or 0  # validated: A/AAAA pools name their port
            return sorted({Target(a, port) for a in addresses(reply, config.record)})
        priorities: dict[tuple[str, int], int] = {}  # an address named twice: its best priority
        for name, port, priority in srv_targets(reply):
            hosts = addresses(reply, "A", name) or addresses(reply, "AAAA", name)
            if not hosts:  # not in the additional section: ask for it
                hosts = addresses(await self.query(name, "A", config.timeout_s), "A", name)
            for host in hosts:
                priorities[host, port] = min(priority, priorities.get((host, port), priority))
        return sorted(Target(h, p, priority) for (h, p), priority in priorities.items())

    async def query(self, name: str, record: str, timeout_s: float) -> DNSRecord:
        """One question, one UDP datagram each way; NXDOMAIN is an empty answer."""
        request = DNSRecord.question(name, record)
        nameserver = self.nameserver or system_nameserver()
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bytes] = loop.create_future()
        try:
            async with asyncio.timeout(timeout_s):
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: _OneReply(answer, request.header.id), remote_addr=nameserver
                )
                try:
                    transport.sendto(request.pack())
                    data = await answer
                finally:
                    transport.close()
            reply = DNSRecord.parse(data)
        except TimeoutError as exc:
            raise ResolutionFailed(f"{name} {record}: no answer in {timeout_s} s") from exc
        except (OSError, DNSError) as exc:
            raise ResolutionFailed(f"{name} {record}: {exc!r}") from exc
        rcode = reply.header.rcode
        if rcode not in (RCODE.NOERROR, RCODE.NXDOMAIN):
            raise ResolutionFailed(f"{name} {record}: the nameserver answered {RCODE[rcode]}")
        if reply.header.tc:
            raise ResolutionFailed(f"{name} {record}: the answer was truncated (too many records)")
        return reply


def addresses(reply: DNSRecord, record: str, name: str | None = None) -> list[str]:
    """The A or AAAA addresses in ``reply`` (answers and additional records), of ``name`` if
    given; CNAME chains need no following: a recursive nameserver puts their ends in too."""
    wanted = getattr(QTYPE, record)
    found = []
    for rr in [*reply.rr, *reply.ar]:
        if rr.rtype == wanted and (name is None or _same(rr.rname, name)):
            found.append(str(ipaddress.ip_address(str(rr.rdata))))
    return found


def srv_targets(reply: DNSRecord) -> list[tuple[str, int, int]]:
    """``(target name, port, priority)`` of each SRV answer. The weight is not used: within a
    priority, power-of-two-choices balances by each replica's observed load instead."""
    return [
        (str(rr.rdata.target), int(rr.rdata.port), int(rr.rdata.priority))
        for rr in reply.rr
        if rr.rtype == QTYPE.SRV
    ]


def _same(a: object, b: str) -> bool:
    return str(a).rstrip(".").lower() == b.rstrip(".").lower()


class _OneReply(asyncio.DatagramProtocol):
    """Takes the first datagram that answers our query id; ignores any other."""

    def __init__(self, answer: asyncio.Future[bytes], query_id: int) -> None:
        self._answer = answer
        self._id = query_id

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        if not self._answer.done() and data[:2] == self._id.to_bytes(2, "big"):
            self._answer.set_result(data)

    def error_received(self, exc: Exception) -> None:  # e.g. ICMP port unreachable
        if not self._answer.done():
            self._answer.set_exception(exc)

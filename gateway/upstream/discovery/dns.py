"""DNS look-ups for discovery, off the event loop's critical path: what a name points at now.

Two resolvers behind one small protocol (`Resolver`), so discovery's tests put a fake in
their place. `NameserverResolver` asks one nameserver over UDP with dnslib's packet codec on an
asyncio datagram endpoint (SRV needs a real query; no thread, a timeout per query);
`SystemResolver` uses ``loop.getaddrinfo`` (a thread; honours /etc/hosts and search domains)
for A/AAAA. No TCP fallback: a truncated answer is a failure (a pool's answer fits in 512
bytes up to ~30 A records; use SRV with a nameserver that trims, or fewer pods, beyond), and so
is a datagram over `MAX_ANSWER_BYTES` (we send no EDNS, so a nameserver must not send one over
512 bytes; a huge one would stall the event loop while it is parsed).
Only records of the asked name (and its CNAME chain, or an SRV record's targets) count; any
other address in the reply is reported as dropped, never taken.
dnslib's exceptions and socket errors become `ResolutionFailed` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dnslib import QTYPE, RCODE, DNSError, DNSRecord

from gateway.config.discovery import DiscoveryConfig, split_nameserver

RESOLV_CONF = Path("/etc/resolv.conf")
# EDNS's usual buffer size: eight times what a plain query may get
MAX_ANSWER_BYTES = 4096


class ResolutionFailed(Exception):
    """The name could not be resolved now (timeout, SERVFAIL, unreachable nameserver...)."""


@dataclass(frozen=True, slots=True, order=True)
class Target:
    """One address a replica listens on; ``priority``: its SRV record's (lower is preferred;
    0 for A/AAAA answers)."""

    # an IP address
    host: str
    port: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Dropped:
    """An address the answer held that no replica is taken from, and why."""

    address: str
    reason: str


@dataclass(frozen=True, slots=True)
class Resolution:
    targets: tuple[Target, ...] = ()
    # records of names that were not asked about
    dropped: tuple[Dropped, ...] = ()


class Resolver(Protocol):
    async def resolve(self, config: DiscoveryConfig) -> Resolution:
        """What ``config.dns`` names now (no targets if none); raises `ResolutionFailed`."""
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
    async def resolve(self, config: DiscoveryConfig) -> Resolution:
        family = socket.AF_INET6 if config.record == "AAAA" else socket.AF_INET
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(config.timeout_s):
                infos = await loop.getaddrinfo(
                    config.dns, config.port, family=family, type=socket.SOCK_STREAM
                )
        except socket.gaierror as exc:
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                # no such name or no address: an empty answer, not a failure
                return Resolution()
            raise ResolutionFailed(f"{config.dns}: {exc.strerror}") from exc
        except (OSError, TimeoutError) as exc:
            raise ResolutionFailed(f"{config.dns}: {exc!r}") from exc
        return Resolution(tuple(sorted({Target(str(i[4][0]), int(i[4][1])) for i in infos})))


class NameserverResolver:
    def __init__(self, nameserver: tuple[str, int] | None) -> None:
        # None: the first of /etc/resolv.conf, read per query
        self.nameserver = nameserver

    async def resolve(self, config: DiscoveryConfig) -> Resolution:
        reply = await self.query(config.dns, config.record, config.timeout_s)
        if config.record != "SRV":
            # validated: A/AAAA pools name their port
            port = config.port or 0
            names = aliases(reply, config.dns)
            found = {Target(a, port) for a in addresses(reply, config.record, names)}
            return Resolution(tuple(sorted(found)), unrelated(reply, names, config.dns))
        # an address named twice: its best priority
        priorities: dict[tuple[str, int], int] = {}
        # targets missing from the additional section, asked for one by one
        asked = 0
        for name, port, priority in sorted(srv_targets(reply), key=lambda t: (t[2], t[0], t[1])):
            hosts = addresses(reply, "A", [name]) or addresses(reply, "AAAA", [name])
            if not hosts and asked < config.max_members:
                # ask for it, the best priorities first
                asked += 1
                more = await self.query(name, "A", config.timeout_s)
                hosts = addresses(more, "A", aliases(more, name))
            for host in hosts:
                priorities[host, port] = min(priority, priorities.get((host, port), priority))
        targets = tuple(sorted(Target(h, p, priority) for (h, p), priority in priorities.items()))
        names = {name for name, _, _ in srv_targets(reply)}
        return Resolution(targets, unrelated(reply, names, config.dns))

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
            if len(data) > MAX_ANSWER_BYTES:
                raise ResolutionFailed(
                    f"{name} {record}: an answer of {len(data)} bytes, over {MAX_ANSWER_BYTES}"
                )
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


def addresses(reply: DNSRecord, record: str, names: Collection[str]) -> list[str]:
    """The A or AAAA addresses in ``reply`` (answers and additional records) of ``names``."""
    wanted = getattr(QTYPE, record)
    keys = {_key(name) for name in names}
    return [
        str(ipaddress.ip_address(str(rr.rdata)))
        for rr in [*reply.rr, *reply.ar]
        if rr.rtype == wanted and _key(rr.rname) in keys
    ]


def aliases(reply: DNSRecord, name: str) -> set[str]:
    """``name`` and the names its CNAME chain in the answers leads to (a recursive nameserver
    puts the chain's records in; none is asked for)."""
    current = _key(name)
    names = {current}
    cnames = {_key(rr.rname): _key(rr.rdata.label) for rr in reply.rr if rr.rtype == QTYPE.CNAME}
    while (following := cnames.get(current)) is not None and following not in names:
        names.add(following)
        current = following
    return names


def unrelated(reply: DNSRecord, names: Collection[str], asked: str) -> tuple[Dropped, ...]:
    """Every A/AAAA record in ``reply`` of a name other than ``names``: an answer may carry
    them (a misconfigured or hostile nameserver's additional section), a pool never takes
    them."""
    keys = {_key(name) for name in names}
    return tuple(
        Dropped(str(rr.rdata), f"a record of {_key(rr.rname)}, not of {asked}")
        for rr in [*reply.rr, *reply.ar]
        if rr.rtype in (QTYPE.A, QTYPE.AAAA) and _key(rr.rname) not in keys
    )


def srv_targets(reply: DNSRecord) -> list[tuple[str, int, int]]:
    """``(target name, port, priority)`` of each SRV answer. The weight is not used: within a
    priority, power-of-two-choices balances by each replica's observed load instead."""
    return [
        (str(rr.rdata.target), int(rr.rdata.port), int(rr.rdata.priority))
        for rr in reply.rr
        if rr.rtype == QTYPE.SRV
    ]


def _key(name: object) -> str:
    return str(name).rstrip(".").lower()


class _OneReply(asyncio.DatagramProtocol):
    """Takes the first datagram that answers our query id; ignores any other."""

    def __init__(self, answer: asyncio.Future[bytes], query_id: int) -> None:
        self._answer = answer
        self._id = query_id

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        if not self._answer.done() and data[:2] == self._id.to_bytes(2, "big"):
            self._answer.set_result(data)

    def error_received(self, exc: Exception) -> None:
        # e.g. ICMP port unreachable
        if not self._answer.done():
            self._answer.set_exception(exc)

"""A real DNS server on a free loopback UDP port whose answers a test changes while it runs.

dnslib's `DNSServer` answers in its own thread from `ChangingResolver`, which holds one list of
resource records per (name, type); `set` replaces a list atomically. Names not set answer
NXDOMAIN; `fail` makes every answer SERVFAIL (a broken nameserver); `additional` records go
into every answer's additional section (a hostile or misconfigured nameserver's). Answers are
never truncated, however long (as a hostile nameserver's).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dnslib import QTYPE, RCODE, RR, DNSRecord
from dnslib.server import DNSLogger, DNSServer


class ChangingResolver:
    def __init__(self) -> None:
        self._records: dict[tuple[str, str], list[RR]] = {}
        self._lock = threading.Lock()
        self.fail = False
        self.additional: list[RR] = []
        self.queries = 0

    def set(self, name: str, record: str, zone_lines: Sequence[str]) -> None:
        """``zone_lines``: records in zone-file syntax, e.g. ``"x. 1 IN A 127.0.0.1"``."""
        rrs = [rr for line in zone_lines for rr in RR.fromZone(line)]
        with self._lock:
            self._records[(_key(name), record)] = rrs

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        self.queries += 1
        reply = request.reply()
        if self.fail:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        name, record = _key(str(request.q.qname)), QTYPE[request.q.qtype]
        with self._lock:
            answers = self._records.get((name, record))
            extra = [
                rr
                for a in answers or []
                if record == "SRV"
                for kind in ("A", "AAAA")
                for rr in self._records.get((_key(str(a.rdata.target)), kind), [])
            ]
        if answers is None and not any(n == name for n, _ in self._records):
            reply.header.rcode = RCODE.NXDOMAIN
            return reply
        for rr in answers or []:
            reply.add_answer(rr)
        for rr in [*extra, *self.additional]:
            reply.add_ar(rr)
        return reply


def _key(name: str) -> str:
    return name.rstrip(".").lower()


@contextmanager
def dns_server() -> Iterator[tuple[ChangingResolver, int]]:
    """Serves on 127.0.0.1:<free port> until the block ends; yields (resolver, port)."""
    resolver = ChangingResolver()
    quiet = DNSLogger(prefix=False, logf=lambda _: None)
    server = DNSServer(resolver, port=0, address="127.0.0.1", logger=quiet)
    server.start_thread()
    try:
        yield resolver, int(server.server.server_address[1])
    finally:
        server.stop()
        server.server.server_close()

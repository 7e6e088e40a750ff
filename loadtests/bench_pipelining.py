"""Connections that pipeline many requests and never read: the workers' memory and others' latency.

Issue 37's attack at its full size: ``--connections`` (8) connections each write ``--requests``
(100,000) pipelined ``GET /v2/health/live`` and never read a byte (a small receive buffer,
reading paused), held for ``--seconds`` (30), on a ``gateway serve`` with ``--workers``
data-plane workers (2) over one digits replica. Meanwhile a second client sends one-row digits
infers (closed loop, ``--concurrency``), first alone (the reference), then under the flood. It
prints the client's failures and latency quantiles, the workers' RSS (added up) before, at its
peak under the flood and once the attackers have closed (waiting, bounded, for it to come back
within 16 MiB of where it was), and how many bytes the attackers got the gateway to take.

Bounded in time (about ``--seconds`` + 60 s). Run: ``.venv/bin/python
loadtests/bench_pipelining.py [--seconds 30] [--connections 8] [--requests 100000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests import bystander
from loadtests.bystander import DIGITS
from loadtests.stack import Stack, rss_of, worker_pids

LIVE = b"GET /v2/health/live HTTP/1.1\r\nhost: gateway\r\n\r\n"
RCVBUF = 16 * 1024  # an attacker's receive buffer: the kernel holds little of what it skips
SETTLE_S = 3.0  # the flood in place before the client is measured
BACK_WITHIN = 16 * 1024 * 1024
BACK_WAIT_S = 30.0


async def _flood(port: int, connections: int, requests: int, seconds: float) -> str:
    """Writes the pipelined requests on each connection, never reads, and aborts them all
    after ``seconds``; says how many bytes the gateway took off the attackers' hands."""
    loop = asyncio.get_running_loop()
    payload = LIVE * requests
    transports = []
    for _ in range(connections):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        transport, _ = await loop.create_connection(asyncio.Protocol, sock=sock)
        transport.pause_reading()
        transport.write(payload)
        transports.append(transport)
    await asyncio.sleep(seconds)
    unsent = sum(t.get_write_buffer_size() for t in transports)
    for transport in transports:
        transport.abort()
    written = len(payload) * connections
    return (
        f"{written >> 20} MiB of requests written, {(written - unsent) >> 20} MiB of it taken "
        f"by the kernel and the gateway, {unsent >> 20} MiB never left the attacker"
    )


def _attacker(port: int, connections: int, requests: int, seconds: float, out: Any) -> None:
    out.put(uvloop.run(_flood(port, connections, requests, seconds)))


class PeakRss:
    """The workers' RSS added up, sampled every 0.1 s in a thread; its peak kept."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.peak = rss_of(pids)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, rss_of(self.pids))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=1.0)
        return self.peak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the flood lasts")
    parser.add_argument("--connections", type=int, default=8, help="pipelining connections")
    parser.add_argument("--requests", type=int, default=100_000, help="requests a connection")
    parser.add_argument("--concurrency", type=int, default=4, help="the client's connections")
    parser.add_argument("--workers", type=int, default=2, help="the gateway's data-plane workers")
    args = parser.parse_args(argv)
    with Stack() as stack:
        replica = stack.replica("digits", DIGITS, faults=False)
        config = {
            "server": {"workers": args.workers},
            "pools": {"p": {"model": DIGITS, "replicas": [{"id": "r0", "url": replica.url}]}},
            "models": {DIGITS: {"pool": "p"}},
        }
        gateway = stack.gateway(config)
        port = int(gateway.url.rsplit(":", 1)[1])
        bystander.run(gateway.url, 3.0, args.concurrency)  # warm: connections, caches
        alone = bystander.run(gateway.url, 10.0, args.concurrency)
        workers = worker_pids(gateway.url)
        baseline = rss_of(workers)
        peak = PeakRss(workers)
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        flood = (port, args.connections, args.requests, args.seconds)
        attacker = ctx.Process(target=_attacker, args=(*flood, out), daemon=True)
        attacker.start()
        time.sleep(SETTLE_S)
        flooded = bystander.run(gateway.url, args.seconds - SETTLE_S - 1.0, args.concurrency)
        attacker.join(timeout=args.seconds + 30.0)
        seen = out.get(timeout=10.0) if attacker.exitcode == 0 else "attacker failed"
        highest = peak.stop()
        closed = time.monotonic()
        while rss_of(workers) > baseline + BACK_WITHIN and time.monotonic() - closed < BACK_WAIT_S:
            time.sleep(0.1)
        after, back_s = rss_of(workers), time.monotonic() - closed
    print(
        f"{args.connections} connections x {args.requests:,} pipelined GET /v2/health/live, "
        f"never read, for {args.seconds:g} s; {args.workers} workers; a client of one-row "
        f"infers, {args.concurrency} connections, all on 127.0.0.1"
    )
    print(bystander.table(alone, flooded))
    print(
        f"workers' RSS: {baseline >> 20} MiB before, {highest >> 20} MiB at most under the "
        f"flood, {after >> 20} MiB {back_s:.1f} s after the attackers closed"
    )
    print(f"attacker: {seen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

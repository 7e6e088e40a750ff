"""What ``echoes_id: false`` costs: one exchange per connection against keep-alive reuse.

Why: a pool whose server does not return request ids gets a new connection for every exchange
(``Connection: close``, never pooled), so that no late answer can be read as another request's.
This measures what that costs the gateway's transport (`Http1Transport`) on this machine: client
CPU per request, the upstream's CPU per request (it accepts a connection each time), latency,
throughput, and the TIME_WAIT sockets left on each side. The upstream is the replica stand-in
of ``bench_transport.py`` (uvicorn + httptools + uvloop, a fixed V2 reply).

    .venv/bin/python loadtests/bench_connection_reuse.py [--seconds 3] [--concurrency 1,8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.http1 import Http1Transport
from loadtests.bench_transport import (
    BODY,
    HEADERS,
    PATH,
    REPLY,
    process_cpu_s,
    start_upstream,
    stop,
)

WARMUP_S = 1.0
TIME_WAIT = "06"  # the state's code in /proc/net/tcp


@dataclass(frozen=True)
class Cell:
    keep_alive: bool
    concurrency: int
    requests: int
    errors: int
    wall_s: float
    cpu_s: float
    upstream_cpu_s: float
    latencies_s: list[float]
    time_wait: tuple[int, int]  # (the upstream's side, the client's side)

    def row(self) -> str:
        q = statistics.quantiles(self.latencies_s, n=100)
        n = self.requests
        mode = "keep-alive" if self.keep_alive else "one per conn"
        return (
            f"{mode:<14}{self.concurrency:>5}{n / self.wall_s:>9,.0f}{q[49] * 1e3:>8.3f}"
            f"{q[98] * 1e3:>8.3f}{self.cpu_s / n * 1e6:>12,.0f}"
            f"{self.upstream_cpu_s / n * 1e6:>14,.0f}"
            f"{self.time_wait[0]:>11,}{self.time_wait[1]:>11,}{self.errors:>7}"
        )


def time_wait_sockets(port: int) -> tuple[int, int]:
    """TIME_WAIT sockets on loopback to or from ``port``: (held by its side, by the peer's)."""
    server = client = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] != TIME_WAIT:
            continue
        local, remote = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
        server += local == port
        client += remote == port
    return server, client


async def run_cell(keep_alive: bool, concurrency: int, seconds: float, port: int, pid: int) -> Cell:
    endpoint = Endpoint("127.0.0.1", port, keep_alive=keep_alive)
    transport = Http1Transport()
    latencies: list[float] = []
    sent = errors = 0
    stop_at = 0.0

    async def worker() -> None:
        nonlocal sent, errors
        clock = time.perf_counter
        while clock() < stop_at:
            sent += 1
            started = clock()
            reply = await transport.request(
                endpoint, "POST", PATH, body=BODY, headers=HEADERS, timeout=10.0
            )
            errors += reply.status != 200 or reply.body != REPLY
            latencies.append(clock() - started)

    try:
        stop_at = time.perf_counter() + WARMUP_S
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        latencies.clear()
        sent = errors = 0
        upstream0, cpu0, wall0 = process_cpu_s(pid), time.process_time(), time.perf_counter()
        stop_at = wall0 + seconds
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        upstream = process_cpu_s(pid) - upstream0
    finally:
        await transport.aclose()
    waiting = time_wait_sockets(port)
    return Cell(keep_alive, concurrency, sent, errors, wall, cpu, upstream, latencies, waiting)


async def bench(args: argparse.Namespace, port: int, pid: int) -> list[Cell]:
    cells = []
    for concurrency in args.concurrency:
        for keep_alive in (True, False):
            cells.append(await run_cell(keep_alive, concurrency, args.seconds, port, pid))
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per cell")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8]
    )
    args = parser.parse_args()
    import uvloop

    proc, port = start_upstream()
    try:
        cells = uvloop.run(bench(args, port, proc.pid))
    finally:
        stop(proc)
    header = (
        f"{'connections':<14}{'conc':>5}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'client µs':>12}{'upstream µs':>14}{'TW server':>11}{'TW client':>11}{'errors':>7}"
    )
    print(
        f"request {len(BODY)} B, reply {len(REPLY)} B, {args.seconds:g} s per cell; "
        "CPU per request; TW: TIME_WAIT sockets left, cumulative"
    )
    print(header)
    print("-" * len(header))
    for cell in cells:
        print(cell.row())


if __name__ == "__main__":
    main()

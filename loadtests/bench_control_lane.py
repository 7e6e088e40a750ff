"""What keeping control requests off the infer connections costs, two ways.

Why: a health probe or metadata request must never read a late inference answer left on a
keep-alive connection (it carries no id to catch it). `Http1Transport` gives GET and HEAD their
own lane of pooled connections per endpoint; the alternative is a fresh connection per control
request. This measures both on this machine with `Http1Transport`: client and upstream CPU per
probe, latency, TIME_WAIT sockets left per probe (on each side), and the connections a replica
holds under infer load with probes at the default interval (0.5 s). The upstream is the
replica stand-in of ``bench_transport.py`` (uvicorn + httptools + uvloop, one fixed reply to
every request).

    .venv/bin/python loadtests/bench_control_lane.py [--seconds 3] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.http1 import Http1Transport
from loadtests.bench_connection_reuse import time_wait_sockets
from loadtests.bench_transport import BODY, HEADERS, PATH, process_cpu_s, start_upstream, stop

READY = "/v2/models/digits-mlp/versions/1/ready"
PROBE_INTERVAL_S = 0.5  # the health check's default interval
ESTABLISHED = "01"  # the state's code in /proc/net/tcp


def established_to(port: int) -> int:
    """Client-side sockets connected to ``port`` on loopback."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    fields = (line.split() for line in lines)
    return sum(f[3] == ESTABLISHED and int(f[2].split(":")[1], 16) == port for f in fields)


async def probes(keep_alive: bool, seconds: float, port: int, pid: int) -> str:
    """Back-to-back probes for ``seconds``: the cost of one, on a pooled or a fresh connection."""
    endpoint = Endpoint("127.0.0.1", port, keep_alive=keep_alive)
    transport = Http1Transport()
    latencies: list[float] = []
    try:
        await transport.request(endpoint, "GET", READY, timeout=5.0)  # warm
        before = time_wait_sockets(port)
        upstream0, cpu0, wall0 = process_cpu_s(pid), time.process_time(), time.perf_counter()
        while time.perf_counter() - wall0 < seconds:
            started = time.perf_counter()
            await transport.request(endpoint, "GET", READY, timeout=5.0)
            latencies.append(time.perf_counter() - started)
        cpu, upstream = time.process_time() - cpu0, process_cpu_s(pid) - upstream0
    finally:
        await transport.aclose()
    after = time_wait_sockets(port)
    n = len(latencies)
    mode = "control lane (pooled)" if keep_alive else "fresh connection"
    return (
        f"{mode:<23}{n:>8,}{statistics.median(latencies) * 1e3:>8.3f}{cpu / n * 1e6:>11,.0f}"
        f"{upstream / n * 1e6:>13,.0f}{(after[0] - before[0]) / n:>11.2f}"
        f"{(after[1] - before[1]) / n:>11.2f}"
    )


async def connections_under_load(concurrency: int, seconds: float, port: int) -> tuple[int, int]:
    """(most, last) client connections to the replica during infer traffic at ``concurrency``
    with a health probe every `PROBE_INTERVAL_S`, both on one `Http1Transport`."""
    endpoint = Endpoint("127.0.0.1", port)
    transport = Http1Transport()
    stop_at = time.perf_counter() + seconds
    most = 0

    async def infer() -> None:
        while time.perf_counter() < stop_at:
            await transport.request(endpoint, "POST", PATH, body=BODY, headers=HEADERS, timeout=10)

    async def probe() -> None:
        nonlocal most
        while time.perf_counter() < stop_at:
            await transport.request(endpoint, "GET", READY, timeout=5.0)
            most = max(most, established_to(port))
            await asyncio.sleep(PROBE_INTERVAL_S)

    try:
        await asyncio.gather(probe(), *(infer() for _ in range(concurrency)))
        return most, established_to(port)
    finally:
        await transport.aclose()


async def bench(args: argparse.Namespace, port: int, pid: int) -> None:
    print(
        f"{'probe on':<23}{'probes':>8}{'p50 ms':>8}{'client µs':>11}{'upstream µs':>13}"
        f"{'TW server':>11}{'TW client':>11}"
    )
    print("-" * 85)
    for keep_alive in (True, False):
        print(await probes(keep_alive, args.seconds, port, pid))
    most, last = await connections_under_load(args.concurrency, args.seconds, port)
    print(
        f"\ninfer at concurrency {args.concurrency} + a probe every {PROBE_INTERVAL_S} s: "
        f"at most {most} connections to the replica, {last} at the end "
        f"(infer lane <= {args.concurrency}, control lane 1)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per cell")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    import uvloop

    proc, port = start_upstream()
    try:
        uvloop.run(bench(args, port, proc.pid))
    finally:
        stop(proc)


if __name__ == "__main__":
    main()

"""Benchmark of the upstream transports: throughput, latency and client CPU per proxied request.

Why: the upstream client is most of the gateway's own CPU per request, so the gateway's one
transport ("fast") was picked by these numbers; the others are in ``loadtests/transports``.
The upstream is a realistic replica stand-in (uvicorn + httptools + uvloop, one process, fixed
V2 reply); every transport runs in this process on uvloop (or asyncio), in a closed loop
bounded by duration and by request count, and its cost is this process's CPU time.

    .venv/bin/python loadtests/bench_transport.py [--seconds 2] [--concurrency 1,16,64]
                                                  [--transports fast,aiohttp,httpx,httpx-aiohttp]
                                                  [--loop uvloop|asyncio]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import importlib.util
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

PATH = "/v2/models/digits-mlp/versions/1/infer"
HEADERS = {"content-type": "application/json"}
# A V2 request of one 8x8 digit (64 FP32 inputs): about 700 bytes, like the gateway's traffic.
BODY = json.dumps(
    {
        "id": "bench-0001",
        "inputs": [
            {
                "name": "pixels",
                "datatype": "FP32",
                "shape": [1, 64],
                "data": [round(0.0625 * (i % 16) + 0.000123 * i, 6) for i in range(64)],
            }
        ],
    }
).encode()
# The replica's reply: ten class probabilities and a parameter, about 300 bytes.
REPLY = json.dumps(
    {
        "model_name": "digits-mlp",
        "model_version": "1",
        "id": "bench-0001",
        "parameters": {"replica": "digits-mlp-1-r0"},
        "outputs": [
            {
                "name": "probabilities",
                "datatype": "FP32",
                "shape": [1, 10],
                "data": [round(0.0123456 * (i + 1), 7) for i in range(10)],
            }
        ],
    }
).encode()
MAX_REQUESTS_PER_CELL = 200_000
WARMUP_REQUESTS = 200


# --- the upstream (runs in a child process) ---------------------------------------------------


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Read the whole request, reply with the fixed V2 body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        more = (await receive()).get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(REPLY))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": REPLY})


def serve(fd: int) -> None:
    import uvicorn

    config = uvicorn.Config(
        upstream_app,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        backlog=2048,
    )
    uvicorn.Server(config).run(sockets=[socket.socket(fileno=fd)])


def start_upstream() -> tuple[subprocess.Popen[bytes], int]:
    """The upstream in a child process on a socket bound here; returns once it answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port = int(sock.getsockname()[1])
    cmd = [sys.executable, __file__, "--serve-fd", str(sock.fileno())]
    proc = subprocess.Popen(cmd, pass_fds=[sock.fileno()])
    sock.close()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", PATH, body=BODY, headers=HEADERS)
        if conn.getresponse().read() != REPLY:
            raise RuntimeError("upstream replied with an unexpected body")
    except BaseException:
        stop(proc)
        raise
    finally:
        conn.close()
    return proc, port


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process (Linux /proc; 10 ms resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- the client ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    transport: str
    concurrency: int
    requests: int
    errors: int
    wall_s: float
    cpu_s: float
    upstream_cpu_s: float
    latencies_s: list[float]

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.requests * 1e6

    @property
    def upstream_cpu_us(self) -> float:
        return self.upstream_cpu_s / self.requests * 1e6

    def latency_ms(self, q: int) -> float:
        return statistics.quantiles(self.latencies_s, n=100)[q - 1] * 1e3


async def run_cell(
    name: str, concurrency: int, seconds: float, port: int, upstream_pid: int
) -> Cell:
    from gateway.config.endpoint import Endpoint
    from gateway.errors import UpstreamError
    from loadtests.transports import TransportLimits, make_transport

    endpoint = Endpoint("127.0.0.1", port)
    limits = TransportLimits(
        max_connections_per_endpoint=max(256, concurrency),
        max_idle_per_endpoint=max(64, concurrency),
    )
    transport = make_transport(name, limits)
    latencies: list[float] = []
    sent = errors = 0
    budget = WARMUP_REQUESTS
    stop_at = 0.0

    async def worker() -> None:
        nonlocal sent, errors
        clock = time.perf_counter
        while sent < budget and clock() < stop_at:
            sent += 1
            started = clock()
            try:
                reply = await transport.request(
                    endpoint, "POST", PATH, body=BODY, headers=HEADERS, timeout=10.0
                )
                if reply.status != 200 or len(reply.body) != len(REPLY):
                    errors += 1
            except UpstreamError:
                errors += 1
            latencies.append(clock() - started)

    try:
        async with asyncio.timeout(seconds + 60):  # a hard stop, should all else fail
            stop_at = time.perf_counter() + 10.0  # warm-up: connections open, caches hot
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            latencies.clear()
            sent = errors = 0
            budget = MAX_REQUESTS_PER_CELL
            upstream0, cpu0, wall0 = (
                process_cpu_s(upstream_pid),
                time.process_time(),
                time.perf_counter(),
            )
            stop_at = wall0 + seconds
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            wall = time.perf_counter() - wall0
            cpu = time.process_time() - cpu0
            upstream = process_cpu_s(upstream_pid) - upstream0
    finally:
        await transport.aclose()
    return Cell(name, concurrency, sent, errors, wall, cpu, upstream, latencies)


def print_table(cells: list[Cell]) -> None:
    best_cpu = {
        c.concurrency: min(x.cpu_us for x in cells if x.concurrency == c.concurrency) for c in cells
    }
    best_rps = {
        c.concurrency: max(x.rps for x in cells if x.concurrency == c.concurrency) for c in cells
    }
    header = (
        f"{'transport':<14}{'conc':>5}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'client CPU µs/req':>19}{'× fastest':>10}{'req/s × best':>13}"
        f"{'upstream µs/req':>17}{'errors':>7}"
    )
    print(header)
    print("-" * len(header))
    for c in sorted(cells, key=lambda x: (x.concurrency, x.cpu_us)):
        print(
            f"{c.transport:<14}{c.concurrency:>5}{c.rps:>9,.0f}{c.latency_ms(50):>8.2f}"
            f"{c.latency_ms(99):>8.2f}{c.cpu_us:>19,.0f}{c.cpu_us / best_cpu[c.concurrency]:>10.2f}"
            f"{c.rps / best_rps[c.concurrency]:>13.2f}{c.upstream_cpu_us:>17,.0f}{c.errors:>7}"
        )


async def bench(args: argparse.Namespace, port: int, upstream_pid: int) -> list[Cell]:
    cells = []
    for concurrency in args.concurrency:
        for name in args.transports:
            cell = await run_cell(name, concurrency, args.seconds, port, upstream_pid)
            print(f"  {name} c={concurrency}: {cell.requests} requests", file=sys.stderr)
            cells.append(cell)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time per cell")
    parser.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 16, 64]
    )
    parser.add_argument(
        "--transports",
        type=lambda s: s.split(","),
        default=["fast", "aiohttp", "httpx-aiohttp", "httpx"],
    )
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--serve-fd", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fd is not None:
        serve(args.serve_fd)
        return

    import uvloop

    sniffio = importlib.util.find_spec("sniffio") is not None
    libraries = ", ".join(
        f"{lib} {version(lib)}" for lib in ("uvloop", "httptools", "aiohttp", "httpx", "httpcore")
    )
    print(
        f"python {platform.python_version()}, {os.cpu_count()} cores, {libraries}, "
        f"sniffio {'installed' if sniffio else 'NOT installed'}; "
        f"client loop {args.loop}; request {len(BODY)} B, reply {len(REPLY)} B, "
        f"{args.seconds:g} s per cell",
        flush=True,
    )
    proc, port = start_upstream()
    try:
        run = uvloop.run if args.loop == "uvloop" else asyncio.run
        cells = run(bench(args, port, proc.pid))
    finally:
        stop(proc)
    print_table(cells)


if __name__ == "__main__":
    main()

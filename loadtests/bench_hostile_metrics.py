"""A 15 MiB metrics page read 10 times a second: request latency with it and without it.

Why: the accelerator sampler reads every replica's (or exporter's) ``/metrics`` up to 10 times
a second, and a replica is an untrusted peer; a page parsed on the event loop held every
request behind it (issue 37: a 15 MiB page at 1 s gave ``/v2/health/live`` a p99 of 8.8 s).
Now a page is read no further than ``max_page_bytes`` and parsed in a worker thread, so the
target is a request p99 within 20 % of the same run without the page.

On 127.0.0.1 only: two digits replicas, `tests.support.rogue_metrics` as the exporter of
replica r0's GPU (``/switch``: a normal page, or a 15 MiB flood once switched), and a ``gateway
serve`` with ``--workers`` data-plane workers (2), its control process sampling at 0.1 s (each
read within 0.3 s, the most allowed: a gateway that reads a page whole has the time to). The
CPU a request is that of all the gateway's processes. A closed loop of infer requests
(``--concurrency``) runs ``--rounds`` pairs of phases of ``--seconds`` each, without and with
the flood, alternating so that the machine's drift falls on both; the p99 of each side over
all its phases, and their ratio, are printed from this one run, with how many pages the
gateway refused meanwhile. ``--page huge-framed`` sends the flood with its Content-Length
(refused on its head) instead of chunked (read up to the cap, then refused).

    .venv/bin/python loadtests/bench_hostile_metrics.py [--rounds 3] [--seconds 5] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from pathlib import Path

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from loadtests.loadgen import LoadResult, closed_loop
from loadtests.payloads import DIGITS
from loadtests.stack import Stack, cpu_seconds, free_port, worker_pids
from tests.support.rogue_metrics import UUID_A
from tests.support.traffic import request_bodies

INTERVAL_S = 0.1


def config(replicas: list[str], rogue: str, workers: int) -> dict[str, object]:
    exporter = {"url": rogue, "path": "/switch", "uuid": UUID_A}
    pool = {
        "model": DIGITS,
        "replicas": [{"id": f"r{i}", "url": url} for i, url in enumerate(replicas)],
        # the longest timeout allowed (3 intervals): time to read a page whole where it may be
        "accelerator": {
            "interval_s": INTERVAL_S,
            "timeout_s": 3 * INTERVAL_S,
            "exporters": {"r0": exporter},
        },
    }
    return {
        "server": {"workers": workers},
        "pools": {"pool": pool},
        "models": {DIGITS: {"pool": "pool"}},
    }


def refused(metrics: str) -> int:
    found = re.search(
        r'gateway_accelerator_samples_total\{pool="pool",result="refused"\} (\S+)', metrics
    )
    return int(float(found.group(1))) if found else 0


def merged(results: list[LoadResult]) -> LoadResult:
    whole = LoadResult(seconds=sum(r.seconds for r in results))
    for result in results:
        whole.latencies_s += result.latencies_s
        whole.statuses.update(result.statuses)
        whole.errors.update(result.errors)
    return whole


async def run(args: argparse.Namespace) -> str:
    with Stack() as stack:
        replicas = [stack.replica(f"r{i}", DIGITS, faults=False).url for i in range(2)]
        port = free_port()
        argv = [sys.executable, "-m", "tests.support.rogue_metrics", "--port", str(port)]
        rogue = stack.start("rogue", argv, f"http://127.0.0.1:{port}", "/v2/health/ready")
        gateway = stack.gateway(config(replicas, rogue.url, args.workers))
        # the control process (it samples the pages) and the workers (they serve)
        pids = [gateway.pid, *worker_pids(gateway.url)]
        body = request_bodies(1)[0]
        path = f"/v2/models/{DIGITS}/infer"
        sides: dict[str, list[LoadResult]] = {"without": [], "with": []}
        cpus = {"without": 0.0, "with": 0.0}  # the gateway's CPU seconds, all its processes
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            before = refused((await http.get(f"{gateway.url}/metrics")).text)
            for _ in range(args.rounds):
                for side, mode in (("without", "off"), ("with", args.page)):
                    await http.get(f"{rogue.url}/switch/{mode}")
                    await asyncio.sleep(4 * INTERVAL_S)  # the sampler has met the new page
                    cpu = cpu_seconds(*pids)
                    result = await closed_loop(
                        gateway.url,
                        path,
                        body,
                        concurrency=args.concurrency,
                        seconds=args.seconds,
                        max_requests=10**9,
                    )
                    sides[side].append(result)
                    cpus[side] += cpu_seconds(*pids) - cpu
            await http.get(f"{rogue.url}/switch/off")
            pages = refused((await http.get(f"{gateway.url}/metrics")).text) - before
    whole = {side: merged(results) for side, results in sides.items()}
    rows = [
        "| 15 MiB page (0.1 s) | requests | failed | p50 ms | p99 ms | max ms | CPU µs/request |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side, result in whole.items():
        failed = result.requests - result.statuses.get(200, 0)
        p50, p99, top = (result.quantile_ms(q) for q in (0.5, 0.99, 1.0))
        cpu_us = cpus[side] / max(1, result.requests) * 1e6
        rows.append(
            f"| {side} | {result.requests} | {failed} | {p50:.2f} | {p99:.2f} | {top:.0f} | "
            f"{cpu_us:.0f} |"
        )
    ratio = whole["with"].quantile_ms(0.99) / whole["without"].quantile_ms(0.99)
    table = "\n".join(rows)
    return (
        f"{table}\n\np99 with / without: {ratio:.2f} (target ≤ 1.20); pages refused "
        f"meanwhile: {pages} ({args.page}, {args.rounds} × {args.seconds:g} s a side, "
        f"c={args.concurrency}, {args.workers} workers)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--page", choices=["huge", "huge-framed"], default="huge")
    parser.add_argument("--workers", type=int, default=2, help="the gateway's data-plane workers")
    args = parser.parse_args(argv)
    print(uvloop.run(run(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

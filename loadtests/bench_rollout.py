"""What a shadow costs the client: p50/p99 with a shadow of 100 % of requests vs none.

One digits-mlp replica serves the model's pool and another the candidate's; the gateway runs
a rollout in shadow mode. The gateway's capacity is measured first (closed loop, shadow off),
then each variant gets the same fixed offered load (open loop, half that capacity) for the
same time: shadow off (``shadow_percent: 0``) and shadow on every request (100 %, which
doubles the replicas' work). The target: p50 and p99 with the shadow within 10 % of without.
Each variant runs on a fresh gateway (same replicas). Prints a table; one run.

Run: ``make bench`` or ``.venv/bin/python loadtests/bench_rollout.py [--seconds 15]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError
from gateway.upstream.transport.http1 import Http1Transport
from loadtests.loadgen import LoadResult, closed_loop
from loadtests.stack import Proc, Stack, stop

PATH = "/v2/models/digits/infer"
BODY = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}
)


def config(now: Proc, candidate: Proc, percent: float) -> dict[str, Any]:
    rollout = {
        "candidate": "next",
        "mode": "shadow",
        "shadow_percent": percent,
        "shadow_rate_per_s": 100_000,
        "shadow_concurrency": 256,
    }
    return {
        "pools": {
            "now": {"model": "digits-mlp", "replicas": [{"id": "now-0", "url": now.url}]},
            "next": {"model": "digits-mlp", "replicas": [{"id": "next-0", "url": candidate.url}]},
        },
        "models": {"digits": {"pool": "now", "rollout": rollout}},
        "log": {"level": "WARNING"},
    }


async def open_loop(url: str, rate: float, seconds: float) -> LoadResult:
    """``rate`` requests a second, each sent on time whatever the others are doing."""
    endpoint = Endpoint.parse(url)
    transport = Http1Transport(max_connections_per_endpoint=512)
    result = LoadResult(seconds=seconds)
    began = time.perf_counter()

    async def one(at: float) -> None:
        code = 0
        try:
            response = await transport.request(endpoint, "POST", PATH, body=BODY, timeout=5.0)
            code = response.status
            result.statuses[code] += 1
        except UpstreamError as exc:
            result.errors[type(exc).__name__] += 1
        result.latencies_s.append(time.perf_counter() - at)
        result.codes.append(code)

    tasks = []
    n = int(rate * seconds)
    for i in range(n):
        at = began + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(at)))  # latency counted from when it was due
    await asyncio.gather(*tasks)
    await transport.aclose()
    return result


def compared(url: str) -> dict[str, Any]:
    doc = httpx.get(url + "/admin/rollouts", trust_env=False, timeout=5).json()
    return dict(doc["rollouts"]["digits"]["evidence"]["total"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--fraction", type=float, default=0.5, help="of capacity, offered")
    args = parser.parse_args()
    with Stack() as stack:
        now = stack.replica("now-0", "digits-mlp", faults=False)
        candidate = stack.replica("next-0", "digits-mlp", faults=False)
        gateway = stack.gateway(config(now, candidate, 0), name="capacity")
        capacity = asyncio.run(
            closed_loop(
                gateway.url,
                PATH,
                BODY,
                concurrency=16,
                seconds=args.seconds / 2,
                max_requests=10**9,
            )
        )
        stop(gateway.process)
        answered = capacity.statuses[200] / capacity.seconds  # fast failures are no capacity
        rate = answered * args.fraction
        print(
            f"capacity (closed loop, c16, shadow off): {answered:.0f} answers/s "
            f"({dict(capacity.statuses)} {dict(capacity.errors)}); "
            f"offered load: {rate:.0f} req/s for {args.seconds:g} s"
        )
        rows = []
        for percent in (0.0, 100.0):
            gateway = stack.gateway(config(now, candidate, percent), name=f"shadow-{percent:g}")
            asyncio.run(open_loop(gateway.url, rate, 2.0))  # warm-up
            result = asyncio.run(open_loop(gateway.url, rate, args.seconds))
            evidence = compared(gateway.url)
            stop(gateway.process)
            rows.append((percent, result, evidence))
        print(
            f"{'shadow':>7} {'requests':>9} {'non-200':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'compared':>9} {'agreed':>7} {'shed':>5} {'copy errors':>11}"
        )
        for percent, result, evidence in rows:
            bad = result.requests - result.statuses[200]
            p50, p99 = result.quantile_ms(0.5), result.quantile_ms(0.99)
            print(
                f"{percent:>6g}% {result.requests:>9} {bad:>8} {p50:>8.2f} {p99:>8.2f} "
                f"{evidence['compared']:>9} {evidence['agreed']:>7} "
                f"{evidence['shadow_shed']:>5} {evidence['compare_errors']:>11}  "
                f"{dict(result.statuses)} {dict(result.errors)}"
            )
        off, on = rows[0][1], rows[1][1]
        for q in (0.5, 0.99):
            ratio = on.quantile_ms(q) / off.quantile_ms(q)
            print(f"p{int(q * 100)}: shadow 100 % / off = {ratio:.2f}")


if __name__ == "__main__":
    uvloop.install()
    main()

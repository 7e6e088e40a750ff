"""Gateway overhead benchmark: direct to a replica vs the gateway, nginx and the floor.

One run, same replica, same body (one digits row, JSON), fixed concurrency levels, bounded in
time and requests. Prints req/s, p50/p99 latency, and the proxy process's CPU µs per request
(from /proc), with ratios to direct, to nginx and to the floor: the minimal Python proxy
(``loadtests/minimal_proxy.py``: uvloop + httptools, pooled keep-alive, no features), so the
gateway's cost over its own floor shows in every run. Run: ``make bench`` or
``.venv/bin/python loadtests/bench_overhead.py [--seconds 5] [--concurrency 1,16,64]``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.loadgen import LoadResult, closed_loop
from loadtests.results_file import save
from loadtests.stack import ROOT, Proc, Stack, cpu_seconds, free_port, pool_config, redis_server
from replicas.dataset import load_split

MODEL = "digits-mlp"


@dataclass
class Row:
    target: str
    concurrency: int
    result: LoadResult
    cpu_us: float | None


def body() -> bytes:
    _, x_test, _, _ = load_split()
    row = [float(v) for v in x_test[0]]
    return orjson.dumps(
        {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": row}]}
    )


def measure(
    proc: Proc | None,
    url: str,
    path: str,
    payload: bytes,
    concurrency: int,
    seconds: float,
    max_requests: int,
) -> tuple[LoadResult, float | None]:
    # Warm up connections and caches, then measure.
    uvloop.run(
        closed_loop(url, path, payload, concurrency=concurrency, seconds=0.5, max_requests=500)
    )
    before = cpu_seconds(proc.pid) if proc else None
    result = uvloop.run(
        closed_loop(
            url, path, payload, concurrency=concurrency, seconds=seconds, max_requests=max_requests
        )
    )
    cpu = None
    if proc is not None and before is not None and result.requests:
        cpu = (cpu_seconds(proc.pid) - before) / result.requests * 1e6
    return result, cpu


def variants(stack: Stack, replica: Proc) -> list[tuple[str, Proc | None, str, str]]:
    """The same gateway with Redis shared state on, and with 30 probed replica entries.

    The 30 entries all point at the one replica process: what is measured is the gateway's
    own cost of probing (health every 0.5 s and golden probes per entry) and of balancing
    over 30 replicas, not 30 model servers fighting over two cores.
    """
    redis = redis_server(stack)
    shared = pool_config([replica], MODEL)
    shared["state"] = {"backend": "redis", "redis_url": redis.url, "sync_interval_s": 0.5}
    many = pool_config([replica], MODEL)
    entries = [{"id": f"r{i}", "url": replica.url} for i in range(30)]
    many["pools"]["pool"]["replicas"] = entries
    many["pools"]["pool"]["golden"] = {"file": str(ROOT / "fallback_models" / "digits-golden.json")}
    path = "/v2/models/digits/infer"
    with_redis = stack.gateway(shared, name="gateway-redis")
    with_30 = stack.gateway(many, name="gateway-30")
    return [
        ("gateway[redis state]", with_redis, with_redis.url, path),
        ("gateway[30 replicas probed]", with_30, with_30.url, path),
    ]


def floor(stack: Stack, upstream: Proc, **start: Any) -> Proc:
    """The minimal Python proxy in front of ``upstream`` (``start``: `Stack.start`'s options)."""
    port = free_port()
    argv = [
        sys.executable,
        str(ROOT / "loadtests" / "minimal_proxy.py"),
        "--port",
        str(port),
        "--upstream",
        upstream.url,
    ]
    return stack.start("floor", argv, f"http://127.0.0.1:{port}", "/v2/health/ready", **start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument(
        "--variants",
        action="store_true",
        help="also measure the gateway with Redis shared state, and with 30 probed replicas",
    )
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    payload = body()
    rows: list[Row] = []
    with Stack() as stack:
        replica = stack.replica("replica-0", MODEL, faults=False)
        config = pool_config([replica], MODEL)
        gateway = stack.gateway(config)
        nginx = stack.nginx([replica.url])
        minimal = floor(stack, replica)
        targets: list[tuple[str, Proc | None, str, str]] = [
            ("direct", None, replica.url, f"/v2/models/{MODEL}/infer"),
            ("gateway", gateway, gateway.url, "/v2/models/digits/infer"),
            ("floor", minimal, minimal.url, f"/v2/models/{MODEL}/infer"),
        ]
        if nginx is not None:
            targets.append(("nginx", nginx, nginx.url, f"/v2/models/{MODEL}/infer"))
        if args.variants:
            targets += variants(stack, replica)
        for concurrency in levels:
            for name, proc, url, path in targets:
                result, cpu = measure(
                    proc, url, path, payload, concurrency, args.seconds, args.max_requests
                )
                bad = sum(n for s, n in result.statuses.items() if s != 200)
                if bad or result.errors:
                    print(f"warning: {name} c={concurrency}: {bad} non-200, {dict(result.errors)}")
                rows.append(Row(name, concurrency, result, cpu))
    print(render(rows))
    save("overhead", render(rows))
    return 0


def render(rows: list[Row]) -> str:
    lines = [
        "| target | conc | req/s | p50 ms | p99 ms | proxy CPU µs/req | req/s vs direct "
        "| CPU vs nginx | CPU vs floor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        direct = next(r for r in rows if r.target == "direct" and r.concurrency == row.concurrency)
        nginx = next(
            (r for r in rows if r.target == "nginx" and r.concurrency == row.concurrency), None
        )
        least = next(
            (r for r in rows if r.target == "floor" and r.concurrency == row.concurrency), None
        )
        cpu = f"{row.cpu_us:.0f}" if row.cpu_us is not None else "-"
        lines.append(
            f"| {row.target} | {row.concurrency} | {row.result.rate:.0f} "
            f"| {row.result.quantile_ms(0.5):.2f} | {row.result.quantile_ms(0.99):.2f} | {cpu} "
            f"| {row.result.rate / direct.result.rate:.2f} | {_ratio(row, nginx)} "
            f"| {_ratio(row, least)} |"
        )
    return "\n".join(lines)


def _ratio(row: Row, to: Row | None) -> str:
    """``row``'s CPU per request over ``to``'s, or "-" where either was not measured."""
    if row.cpu_us and to is not None and to.cpu_us:
        return f"{row.cpu_us / to.cpu_us:.1f}×"
    return "-"


if __name__ == "__main__":
    sys.exit(main())

"""The bystander of an attack bench: a client of one-row infers to ``digits-mlp`` measured alone
and while an attacker floods the gateway, and the table that compares the two.

`bench_byte_budget.py` and `bench_pipelining.py` measure the same client the same way; only
their attackers differ.
"""

from __future__ import annotations

import orjson
import uvloop

from loadtests.loadgen import LoadResult, closed_loop

DIGITS = "digits-mlp"
ROW = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.5] * 64}]}
)


def run(url: str, seconds: float, concurrency: int) -> LoadResult:
    """``concurrency`` connections of one-row infers for ``seconds`` (each within 10 s)."""
    path = f"/v2/models/{DIGITS}/infer"
    load = closed_loop(
        url, path, ROW, concurrency=concurrency, seconds=seconds, max_requests=10**7, timeout_s=10.0
    )
    return uvloop.run(load)


def table(alone: LoadResult, flooded: LoadResult) -> str:
    """The client alone and under the flood, and the flood's statuses and errors."""
    return "\n".join(
        [
            "| client | requests | failed | p50 ms | p99 ms | max ms |",
            "|---|---:|---:|---:|---:|---:|",
            _row("alone", alone),
            _row("under the flood", flooded),
            f"statuses under the flood: {dict(flooded.statuses)}, errors {dict(flooded.errors)}",
        ]
    )


def _row(label: str, result: LoadResult) -> str:
    failed = result.requests - result.statuses.get(200, 0)
    return (
        f"| {label} | {result.requests} | {failed} | {result.quantile_ms(0.5):.1f} | "
        f"{result.quantile_ms(0.99):.1f} | {max(result.latencies_s, default=0) * 1000:.0f} |"
    )

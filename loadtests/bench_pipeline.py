"""CPU per request of the request pipeline alone, in process: no sockets, no HTTP server.

Times N calls of ``pipeline.handler`` on a transport that answers at once, on the real clock,
so what is measured is the layers' own cost (admission, deadline, fallback, route, retry,
hedge, balance, attempt with its per-try timeout) and nothing else. Prints CPU µs per request
for a few model shapes. Run: ``.venv/bin/python loadtests/bench_pipeline.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.call import InferCall
from gateway.clock import MonotonicClock
from gateway.config import GatewayConfig, parse_config
from gateway.config.endpoint import Endpoint
from gateway.deadline import Deadline
from gateway.pipeline.build import build_pipeline
from gateway.retry.budget import RetryBudget
from gateway.slo.engine import SloBook
from gateway.telemetry.metrics import Metrics
from gateway.upstream.registry import Registry
from gateway.upstream.transport.base import AnswerRoom, Reply
from gateway.v2.request import parse_infer_request

BODY = orjson.dumps(
    {"id": "1", "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0] * 4}]}
)
REPLY = orjson.dumps(
    {
        "id": "1",
        "model_name": "m",
        "outputs": [{"name": "label", "shape": [1], "datatype": "INT64", "data": [3]}],
    }
)


class InstantTransport:
    """Answers every request at once with a well-formed V2 reply."""

    name = "instant"

    async def request(
        self,
        endpoint: Endpoint,
        method: str,
        path: str,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        timeout: float,
        room: AnswerRoom | None = None,
    ) -> Reply:
        return Reply(200, {"content-type": "application/json"}, REPLY)

    def forget(self, endpoint: Endpoint) -> None:
        pass

    async def aclose(self) -> None:
        pass


def config(replicas: int, **model: Any) -> GatewayConfig:
    return parse_config(
        {
            "pools": {
                "p": {
                    "model": "m",
                    "replicas": [
                        {"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"}
                        for i in range(replicas)
                    ],
                }
            },
            "models": {"m": {"pool": "p", **model}},
        }
    )


SHAPES: dict[str, GatewayConfig] = {
    "3 replicas (per-try timeout)": config(3),
    "1 replica (no retry possible)": config(1),
    "3 replicas + fallback policy": config(3, fallback={"model": "none"}),
}


async def run(cfg: GatewayConfig, requests: int) -> float:
    clock = MonotonicClock()
    registry = Registry(cfg, clock)
    budget = RetryBudget(cfg.retry_budget, clock)
    models = cfg.models.items()
    slo = SloBook(  # as the gateway builds it: its burn policy is the pipeline's adjuster
        {n: m.slos for n, m in models}, clock, policies={n: m.burn_policy for n, m in models}
    )
    pipeline = build_pipeline(
        registry,
        InstantTransport(),
        budget,
        clock,
        random.Random(0),
        metrics=Metrics(),
        adjust=slo.adjustment,
    )
    model = cfg.models["m"]
    info = parse_infer_request(BODY, None)

    async def one() -> None:
        call = InferCall("m", model, BODY, {}, Deadline.after(clock, 1.0), "1", info)
        await pipeline.handler(call)

    for _ in range(2000):  # warm up: latency window, caches
        await one()
    started = time.process_time()
    for _ in range(requests):
        await one()
    return (time.process_time() - started) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=30_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for loop_name, runner in (("uvloop", uvloop.run), ("asyncio", asyncio.run)):
        for shape, cfg in SHAPES.items():
            best = min(runner(run(cfg, args.requests)) for _ in range(args.rounds))
            print(f"{loop_name:8} {shape:32} {best:6.1f} µs/request (best of {args.rounds})")


if __name__ == "__main__":
    main()

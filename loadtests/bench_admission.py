"""CPU per admission: the admission layer around a handler that answers at once.

Times N calls of `AdmissionLayer` (enter, the inner call, leave) and of `FairShare.enter` +
``leave`` alone, with no tenants configured (anonymous has the whole bound) and with several
tenants sharing it, so the cost of tenant fairness on the hot path is visible.
Run: ``.venv/bin/python loadtests/bench_admission.py [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.admission.fair_share import FairShare, model_weights
from gateway.admission.layer import AdmissionLayer
from gateway.call import InferAnswer, InferCall
from gateway.clock import MonotonicClock
from gateway.config import GatewayConfig, parse_config
from gateway.config.tenants import ANONYMOUS, TenantConfig
from gateway.deadline import Deadline
from gateway.telemetry.metrics import Metrics

RESULT = InferAnswer(200, b"{}", None, None, "r0", 1)


async def answer(call: InferCall) -> InferAnswer:
    return RESULT


def model_config() -> GatewayConfig:
    return parse_config(
        {
            "pools": {"p": {"model": "m", "replicas": [{"id": "r0", "url": "http://h:1"}]}},
            "models": {"m": {"pool": "p"}},  # max_in_flight 256
        }
    )


def tenants(count: int) -> dict[str, TenantConfig]:
    return {f"t{i}": TenantConfig(key_env=f"K{i}") for i in range(count)}


def decision_ns(count: int, requests: int) -> float:
    """``FairShare.enter`` + ``leave`` for a tenant of ``count`` (0: anonymous alone)."""
    config = model_config()
    share = FairShare("m", config.models["m"].admission, model_weights(tenants(count), False))
    tenant = "t0" if count else ANONYMOUS
    started = time.process_time_ns()
    for _ in range(requests):
        share.leave(share.enter(tenant))
    return (time.process_time_ns() - started) / requests


async def layer_ns(count: int, requests: int, held: int) -> float:
    """The layer's call for a tenant of ``count`` with ``held`` requests of it in flight."""
    config = model_config()
    layer = AdmissionLayer(Metrics(process=False), answer, tenants(count))
    tenant = "t0" if count else ANONYMOUS
    clock = MonotonicClock()
    call = InferCall(
        "m", config.models["m"], b"{}", {}, Deadline.after(clock, 60), "1", tenant=tenant
    )
    share = layer.share_of("m", config.models["m"])
    for _ in range(held):
        share.enter(tenant)
    started = time.process_time_ns()
    for _ in range(requests):
        await layer(call)
    return (time.process_time_ns() - started) / requests


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200_000)
    n = parser.parse_args().requests
    for count in (0, 3, 50):
        who = f"{count} tenants" if count else "no tenants"
        print(f"{who:>11}: decision {decision_ns(count, n):6.0f} ns", end="")
        print(f"   layer {asyncio.run(layer_ns(count, n, 0)):6.0f} ns", end="")
        print(f"   layer, 100 of its own in flight {asyncio.run(layer_ns(count, n, 100)):6.0f} ns")


if __name__ == "__main__":
    main()

"""The calls-per-request guard: function calls (and C calls) per request in the gateway, by shape.

A deterministic benchmark, not a timed one: whatever the machine is doing, one request of a
given shape runs about the same number of functions in the gateway's event-loop thread. The
gateway is started with ``$GATEWAY_CALL_COUNT`` (`gateway.call_count`), each shape's requests
are sent one at a time through the real server to real replicas on loopback inside a counted
window, and an idle window's rate (the background tasks: probes, rollers, samplers) is taken
off in proportion to the window's length. The shapes:

- ``plain``: one digits row, JSON, a single route (no tenants configured);
- ``plain-3``: the same on a pool of three replicas, as `make run` serves ``digits``: a retry
  is possible, so the attempt races its adaptive per-try timeout (three entries for one
  replica process: the gateway's own cost is counted, not three model servers);
- ``api-key``: the same with a tenant's API key, on a gateway that has tenants;
- ``vote-3``: the same row voted over three pools;
- ``canary``: a model in a canary rollout (10 % to the candidate; no comparison copies, which
  run off the path and at random, so the count stays a count);
- ``grpc``: one digits row through the gRPC door;
- ``602KB-binary`` / ``1.2MB-json``: one 1×3×224×224 FP32 image, binary tensors and JSON.

The budgets are ``loadtests/call_budgets.json``; a shape over its budget by more than
``TOLERANCE`` fails `tests/loadtests/test_call_budgets.py`. A budget may rise only in a commit
that says why. Run: ``make bench`` or ``.venv/bin/python loadtests/bench_calls.py``
(``--top`` lists where each shape's calls go).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.payloads import IMAGE, payload
from loadtests.stack import ROOT, Proc, Stack, free_port
from replicas.image_model import write_image_model
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import MODEL_INFER

BUDGETS = Path(__file__).with_name("call_budgets.json")
TOLERANCE = 0.05  # a shape may exceed its budget by this share before the guard fails
COUNT_ENV = "GATEWAY_CALL_COUNT"
KEY_ENV = "CALL_GUARD_TENANT_KEY"
TENANT_KEY = "call-guard-tenant-key-0123"
DIGITS = "digits-mlp"
REQUESTS = 120  # per shape and window
WARM = 20  # requests before the window: connections, schema, caches
WAIT_S = 30.0


@dataclass(frozen=True)
class Count:
    calls: float  # per request, C calls included
    c_calls: float  # of which C builtins
    top: list[tuple[float, str]]


class Counted:
    """A gateway process started with the counter, and its windows."""

    def __init__(self, proc: Proc, path: Path) -> None:
        self.proc = proc
        self.path = path

    def window(self, run: Callable[[], None]) -> tuple[dict[str, Any], float]:
        self.path.unlink(missing_ok=True)
        os.kill(self.proc.pid, signal.SIGUSR1)
        _wait_for(lambda: self.path.exists() and b"counting" in self.path.read_bytes())
        began = time.perf_counter()
        run()
        time.sleep(0.05)  # the last answer's bookkeeping after its bytes left
        os.kill(self.proc.pid, signal.SIGUSR2)
        _wait_for(lambda: self.path.exists() and b'"calls"' in self.path.read_bytes())
        report: dict[str, Any] = orjson.loads(self.path.read_bytes())
        return report, time.perf_counter() - began

    def per_request(self, send: Callable[[], None], n: int = REQUESTS) -> Count:
        for _ in range(WARM):
            send()

        def run() -> None:
            for _ in range(n):
                send()

        busy, _ = self.window(run)
        idle, _ = self.window(lambda: time.sleep(min(busy["seconds"], 2.0)))
        rate = idle["calls"] / idle["seconds"]
        c_rate = idle["c_calls"] / idle["seconds"]
        calls = (busy["calls"] - rate * busy["seconds"]) / n
        c_calls = (busy["c_calls"] - c_rate * busy["seconds"]) / n
        top = [(count / n, name) for count, name in busy["top"]]
        return Count(calls, c_calls, top)


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway's call counter did not answer")
        time.sleep(0.01)


def _row() -> list[float]:
    return [round(0.1 * (i % 10), 1) for i in range(64)]


def digits_body() -> bytes:
    spec = {"name": "input", "shape": [1, 64], "datatype": "FP32", "data": _row()}
    return orjson.dumps({"inputs": [spec]})


def grpc_request(model: str) -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="input", datatype="FP32", shape=[1, 64])
    request.raw_input_contents.append(np.asarray([_row()], dtype="<f4").tobytes())
    return request.SerializeToString()


def _config(replica: Proc, image: Proc, grpc_port: int | None) -> dict[str, Any]:
    def pool(name: str, proc: Proc, model: str = DIGITS) -> dict[str, Any]:
        return {"model": model, "replicas": [{"id": name, "url": proc.url}]}

    canary = {
        "candidate": "next",
        "mode": "canary",
        "steps": [10, 100],
        "hold_s": 86_400,
        "hold_requests": 1_000_000,
        "compare_percent": 0,
    }
    config: dict[str, Any] = {
        "server": {"max_body_bytes": 16 * 1024 * 1024},
        "pools": {
            "mlp": pool("mlp-0", replica),
            "next": pool("next-0", replica),
            "mlp-3": {
                "model": DIGITS,
                "replicas": [{"id": f"mlp3-{i}", "url": replica.url} for i in range(3)],
            },
            "vote-a": pool("a-0", replica),
            "vote-b": pool("b-0", replica),
            "vote-c": pool("c-0", replica),
            "image": pool("image-0", image, IMAGE),
        },
        "models": {
            "digits": {"pool": "mlp"},
            "digits-3": {"pool": "mlp-3"},
            "digits-vote": {"vote": {"pools": ["vote-a", "vote-b", "vote-c"], "quorum": 2}},
            "digits-canary": {"pool": "mlp", "rollout": canary},
            IMAGE: {"pool": "image", "timeout_ms": 10_000},
        },
        "log": {"level": "WARNING"},
    }
    if grpc_port is not None:
        config["server"]["grpc_port"] = grpc_port
    return config


def measure(shapes: list[str] | None = None) -> dict[str, Count]:
    """Starts the stack, counts every shape (or those named), stops it."""
    write_image_model(ROOT / "models")
    with Stack() as stack:
        replica = stack.replica("mlp-0", DIGITS, faults=False)
        image = stack.replica("image-0", IMAGE, faults=False)
        grpc_port = free_port()
        plain = _start(stack, _config(replica, image, grpc_port), "gateway-calls")
        keyed_config = _config(replica, image, None)
        keyed_config["tenants"] = {"guard": {"key_env": KEY_ENV}}
        keyed = _start(stack, keyed_config, "gateway-calls-keyed")
        return _count_all(plain, keyed, grpc_port, shapes)


def _start(stack: Stack, config: dict[str, Any], name: str) -> Counted:
    path = stack.workdir / f"{name}.calls.json"
    proc = stack.gateway(config, name=name, env={COUNT_ENV: str(path), KEY_ENV: TENANT_KEY})
    return Counted(proc, path)


def _count_all(
    plain: Counted, keyed: Counted, grpc_port: int, shapes: list[str] | None
) -> dict[str, Count]:
    rng = np.random.default_rng(21)
    image = rng.uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)
    binary = payload("600KB", "binary", IMAGE, "image", image)
    as_json = payload("600KB", "json", IMAGE, "image", image)
    small = digits_body()
    json_headers = {"content-type": "application/json"}
    key_headers = {**json_headers, "authorization": f"Bearer {TENANT_KEY}"}
    out: dict[str, Count] = {}
    with (
        httpx.Client(trust_env=False, timeout=30.0) as client,
        grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel,
    ):
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(MODEL_INFER.path)
        grpc_body = grpc_request("digits")

        def rest(
            gateway: Counted, model: str, body: bytes, headers: dict[str, str]
        ) -> Callable[[], None]:
            url = f"{gateway.proc.url}/v2/models/{model}/infer"

            def send() -> None:
                response = client.post(url, content=body, headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"{model}: {response.status_code} {response.text[:300]}")

            return send

        def by_grpc() -> None:
            call(grpc_body, timeout=10.0)

        plan: dict[str, tuple[Counted, Callable[[], None]]] = {
            "plain": (plain, rest(plain, "digits", small, json_headers)),
            "plain-3": (plain, rest(plain, "digits-3", small, json_headers)),
            "api-key": (keyed, rest(keyed, "digits", small, key_headers)),
            "vote-3": (plain, rest(plain, "digits-vote", small, json_headers)),
            "canary": (plain, rest(plain, "digits-canary", small, json_headers)),
            "grpc": (plain, by_grpc),
            "602KB-binary": (plain, rest(plain, IMAGE, binary.body, binary.headers)),
            "1.2MB-json": (plain, rest(plain, IMAGE, as_json.body, as_json.headers)),
        }
        for shape, (gateway, send) in plan.items():
            if shapes is None or shape in shapes:
                out[shape] = gateway.per_request(send)
    return out


def budgets() -> dict[str, int]:
    loaded: dict[str, int] = orjson.loads(BUDGETS.read_bytes())["calls_per_request"]
    return loaded


def over_budget(counts: dict[str, Count], limits: dict[str, int]) -> list[str]:
    """The shapes whose calls exceed their budget by more than `TOLERANCE`, said plainly."""
    over = []
    for shape, count in counts.items():
        limit = limits.get(shape)
        if limit is None:
            over.append(f"{shape}: {count.calls:.0f} calls per request, and no budget")
        elif count.calls > limit * (1 + TOLERANCE):
            over.append(f"{shape}: {count.calls:.0f} calls per request, budget {limit} (+5 %)")
    return over


def render(counts: dict[str, Count], limits: dict[str, int]) -> str:
    lines = [
        "| shape | calls/request | of which C | budget | used |",
        "|---|---:|---:|---:|---:|",
    ]
    for shape, count in counts.items():
        limit = limits.get(shape)
        used = f"{count.calls / limit:.0%}" if limit else "-"
        lines.append(
            f"| {shape} | {count.calls:.0f} | {count.c_calls:.0f} | {limit or '-'} | {used} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", help="only this shape (repeatable)")
    parser.add_argument("--top", type=int, default=0, help="list each shape's N costliest entries")
    args = parser.parse_args(argv)
    counts = measure(args.shape)
    limits = budgets()
    print("Calls per request in the gateway's loop thread (cProfile; idle rate taken off):")
    print(render(counts, limits))
    for shape, count in counts.items():
        if args.top:
            print(f"\n{shape}:")
            for per, name in count.top[: args.top]:
                print(f"  {per:7.1f}  {name}")
    over = over_budget(counts, limits)
    for line in over:
        print(f"OVER BUDGET {line}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

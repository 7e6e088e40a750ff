"""gRPC benchmark: direct gRPC to a replica vs through the gateway's gRPC door, beside REST.

One run, one replica serving both REST and gRPC (``replica serve --grpc-port``), one gateway
serving both doors. Two payloads: one digits row (256 B of FP32) and 2,400 rows (600 KB), sent
as raw contents over gRPC (what ``tritonclient.grpc`` sends) and as binary tensors over REST.
Prints req/s, p50/p99, the gateway's and the replica's CPU µs per request (from /proc), and
each gateway row's throughput and CPU next to the same door's direct row, and gRPC's gateway
CPU next to REST's. Run: ``make bench`` or ``.venv/bin/python loadtests/bench_grpc.py
[--seconds 5] [--concurrency 1,16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.loadgen import LoadResult, closed_loop
from loadtests.results_file import save
from loadtests.stack import ROOT, Proc, Stack, cpu_seconds, free_port, pool_config
from replicas.dataset import load_split
from v2proto.grpc import grpc_service_pb2 as pb
from v2proto.grpc.service import MODEL_INFER

MODEL = "digits-mlp"
LARGE_ROWS = 2400  # 2,400 x 64 FP32 = 600 KB


@dataclass(frozen=True)
class Payload:
    name: str
    rows: np.ndarray

    def grpc(self, model: str) -> bytes:
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="input", datatype="FP32", shape=list(self.rows.shape))
        request.raw_input_contents.append(self.rows.tobytes())
        request.outputs.add(name="label")
        return request.SerializeToString()

    def rest(self) -> tuple[bytes, dict[str, str]]:
        raw = self.rows.tobytes()
        head = orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "input",
                        "shape": list(self.rows.shape),
                        "datatype": "FP32",
                        "parameters": {"binary_data_size": len(raw)},
                    }
                ],
                "outputs": [{"name": "label", "parameters": {"binary_data": True}}],
            }
        )
        headers = {
            "content-type": "application/octet-stream",
            "inference-header-content-length": str(len(head)),
        }
        return head + raw, headers


@dataclass
class Row:
    door: str  # grpc or rest
    target: str  # direct or gateway
    payload: str
    concurrency: int
    result: LoadResult
    gateway_us: float | None
    replica_us: float | None


def payloads() -> list[Payload]:
    _, x_test, _, _ = load_split()
    rows = np.asarray(x_test, dtype=np.float32)
    large = np.resize(rows, (LARGE_ROWS, rows.shape[1]))
    return [Payload("256 B", rows[:1]), Payload("600 KB", large)]


async def grpc_closed_loop(
    target: str, request: bytes, *, concurrency: int, seconds: float, max_requests: int
) -> LoadResult:
    """``concurrency`` callers on one channel (HTTP/2 streams), the request pre-serialized."""
    result = LoadResult(seconds=0.0)
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    sent = 0
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        # bytes in, bytes out: the client parses nothing
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(MODEL_INFER.path)
        stop_at = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal sent
            while sent < max_requests and time.perf_counter() < stop_at:
                sent += 1
                started = time.perf_counter()
                code = 200
                try:
                    await call(request, timeout=5.0)
                except grpc.aio.AioRpcError as exc:
                    code = 0
                    result.errors[exc.code().name] += 1
                result.statuses[code] += 1
                result.latencies_s.append(time.perf_counter() - started)
                result.starts_s.append(started - began)
                result.codes.append(code)

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - began
    return result


def measured(
    run: Callable[[float, int], LoadResult],
    gateway: Proc | None,
    replica: Proc,
    seconds: float,
    max_requests: int,
) -> tuple[LoadResult, float | None, float | None]:
    run(0.5, 300)  # warm connections and caches
    procs = [p for p in (gateway, replica) if p is not None]
    before = [cpu_seconds(p.pid) for p in procs]
    result = run(seconds, max_requests)
    per = [
        (cpu_seconds(p.pid) - b) / result.requests * 1e6 if result.requests else None
        for p, b in zip(procs, before, strict=True)
    ]
    return result, per[0] if gateway is not None else None, per[-1]


def runner(
    door: str, where: str, model: str, payload: Payload, concurrency: int
) -> Callable[[float, int], LoadResult]:
    """One closed loop of ``door`` against ``where``, for ``seconds`` or ``most`` requests."""
    request = payload.grpc(model)
    body, headers = payload.rest()

    def run(seconds: float, most: int) -> LoadResult:
        if door == "grpc":
            return uvloop.run(
                grpc_closed_loop(
                    where, request, concurrency=concurrency, seconds=seconds, max_requests=most
                )
            )
        return uvloop.run(
            closed_loop(
                where,
                f"/v2/models/{model}/infer",
                body,
                concurrency=concurrency,
                seconds=seconds,
                max_requests=most,
                headers=headers,
            )
        )

    return run


def start_replica(stack: Stack) -> tuple[Proc, str]:
    port, grpc_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "replicas.cli",
        "serve",
        "--model",
        str(ROOT / "models" / f"{MODEL}.onnx"),
        "--name",
        MODEL,
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
    ]
    proc = stack.start("replica-0", argv, f"http://127.0.0.1:{port}", "/v2/health/ready")
    return proc, f"127.0.0.1:{grpc_port}"


def start_gateway(stack: Stack, replica: Proc) -> tuple[Proc, str]:
    config = pool_config([replica], MODEL, max_rows=LARGE_ROWS)
    grpc_port = free_port()
    config["server"] = {"grpc_port": grpc_port}
    proc = stack.gateway(config)
    target = f"127.0.0.1:{grpc_port}"
    deadline = time.monotonic() + 10
    with grpc.insecure_channel(target) as channel:  # ready once HTTP is: wait for its port
        grpc.channel_ready_future(channel).result(timeout=max(0.1, deadline - time.monotonic()))
    return proc, target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,16")
    parser.add_argument("--max-requests", type=int, default=100_000)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    rows: list[Row] = []
    with Stack() as stack:
        replica, replica_grpc = start_replica(stack)
        gateway, gateway_grpc = start_gateway(stack, replica)
        for payload in payloads():
            for concurrency in levels:
                targets = [
                    ("grpc", "direct", None, replica_grpc, MODEL),
                    ("grpc", "gateway", gateway, gateway_grpc, "digits"),
                    ("rest", "direct", None, replica.url, MODEL),
                    ("rest", "gateway", gateway, gateway.url, "digits"),
                ]
                for door, target, proc, where, model in targets:
                    run = runner(door, where, model, payload, concurrency)
                    result, gateway_us, replica_us = measured(
                        run, proc, replica, args.seconds, args.max_requests
                    )
                    bad = sum(n for s, n in result.statuses.items() if s != 200)
                    if bad or result.errors:
                        print(
                            f"warning: {door} {target} {payload.name} c={concurrency}: "
                            f"{bad} failed, {dict(result.errors)}"
                        )
                    rows.append(
                        Row(door, target, payload.name, concurrency, result, gateway_us, replica_us)
                    )
    print(render(rows))
    save("grpc", render(rows))
    return 0


def render(rows: list[Row]) -> str:
    lines = [
        "| door | target | payload | conc | req/s | p50 ms | p99 ms | gateway CPU µs/req "
        "| replica CPU µs/req | req/s vs direct | gateway CPU vs REST's |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        same = [r for r in rows if r.payload == row.payload and r.concurrency == row.concurrency]
        direct = next(r for r in same if r.door == row.door and r.target == "direct")
        rest = next(r for r in same if r.door == "rest" and r.target == row.target)

        def us(value: float | None) -> str:
            return "-" if value is None else f"{value:.0f}"

        vs_rest = "-"
        if row.door == "grpc" and row.gateway_us and rest.gateway_us:
            vs_rest = f"{row.gateway_us / rest.gateway_us:.2f}×"
        lines.append(
            f"| {row.door} | {row.target} | {row.payload} | {row.concurrency} "
            f"| {row.result.rate:.0f} | {row.result.quantile_ms(0.5):.2f} "
            f"| {row.result.quantile_ms(0.99):.2f} | {us(row.gateway_us)} | {us(row.replica_us)} "
            f"| {row.result.rate / direct.result.rate:.2f} | {vs_rest} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

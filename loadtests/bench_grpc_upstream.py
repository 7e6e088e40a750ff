"""What a gRPC upstream costs the gateway next to an HTTP one: one replica, two ways to reach it.

Why: a pool of ``grpc://`` replicas sends each REST request the pipeline carries as a V2 gRPC
call (`GrpcTransport`: the body converted to ``ModelInferRequest``, the reply converted back),
where an ``http://`` pool sends the body as it is (`Http1Transport`). This measures, on this
machine, the gateway side's CPU per request (the transport and its conversions, in this
process), the replica's CPU per request and the latency, for the same requests to one
``replica serve --grpc-port`` process: a small one (one row of 64 FP32 as JSON) and a 600 KB
one (2 400 rows as binary tensor data, outputs asked back as binary; and the same as JSON,
which reaches our replica as raw contents, as it lists ``binary_tensor_data``),
``--concurrency`` in flight.

    .venv/bin/python loadtests/bench_grpc_upstream.py [--seconds 3] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere in the repo

from gateway.config.endpoint import Endpoint
from gateway.upstream.transport.base import Transport
from gateway.upstream.transport.grpc_client import GrpcTransport
from gateway.upstream.transport.http1 import Http1Transport
from loadtests.bench_transport import process_cpu_s
from tests.support.processes import start_replica
from v2proto.codec import EncodedBody, encode_infer_request

MODEL = Path(__file__).resolve().parents[1] / "models" / "digits-mlp.onnx"
PATH = "/v2/models/digits-mlp/versions/1/infer"


def bodies() -> dict[str, EncodedBody]:
    rng = np.random.default_rng(0)
    small = rng.random((1, 64), dtype=np.float32) * 16
    large = rng.random((2400, 64), dtype=np.float32) * 16  # 614 400 bytes of tensor
    return {
        "small JSON": encode_infer_request({"input": small}),
        "600 KB binary": encode_infer_request(
            {"input": large}, binary_inputs=True, binary_outputs=True
        ),
        "600 KB JSON": encode_infer_request({"input": large}),
    }


async def run(
    transport: Transport,
    endpoint: Endpoint,
    body: EncodedBody,
    seconds: float,
    concurrency: int,
    pid: int,
) -> tuple[int, float, float, float, float]:
    """(requests, client CPU µs/req, replica CPU µs/req, p50 ms, p99 ms)."""
    headers = body.headers()
    await transport.request(endpoint, "GET", "/v2", timeout=10)  # as the gateway learns it
    for _ in range(20):  # warm: connections, channel, caches
        reply = await transport.request(
            endpoint, "POST", PATH, body=body.body, headers=headers, timeout=10
        )
        assert reply.status == 200, reply.body[:200]
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            started = time.perf_counter()
            await transport.request(
                endpoint, "POST", PATH, body=body.body, headers=headers, timeout=10
            )
            latencies.append(time.perf_counter() - started)

    upstream0, cpu0 = process_cpu_s(pid), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, upstream = time.process_time() - cpu0, process_cpu_s(pid) - upstream0
    n = len(latencies)
    q = statistics.quantiles(latencies, n=100)
    return n, cpu / n * 1e6, upstream / n * 1e6, q[49] * 1e3, q[98] * 1e3


async def main(seconds: float, concurrency: int) -> None:
    replica = start_replica(MODEL, name="digits-mlp", grpc=True, extra_args=["--threads", "1"])
    try:
        assert replica.grpc_url is not None
        ways: list[tuple[str, Transport, Endpoint]] = [
            ("http", Http1Transport(), Endpoint.parse(replica.url)),
            ("grpc", GrpcTransport(), Endpoint.parse(replica.grpc_url)),
        ]
        print(
            f"{'payload':<14} {'upstream':<8} {'req':>6} {'gateway CPU':>12} "
            f"{'replica CPU':>12} {'p50':>8} {'p99':>8}"
        )
        for label, body in bodies().items():
            for name, transport, endpoint in ways:
                n, cpu, upstream, p50, p99 = await run(
                    transport, endpoint, body, seconds, concurrency, replica.pid
                )
                print(
                    f"{label:<14} {name:<8} {n:>6} {cpu:>9.0f} µs {upstream:>9.0f} µs "
                    f"{p50:>5.2f} ms {p99:>5.2f} ms"
                )
        for _, transport, _ in ways:
            await transport.aclose()
    finally:
        replica.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    import uvloop

    uvloop.run(main(args.seconds, args.concurrency))

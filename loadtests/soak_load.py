"""Steady load for soak runs: closed-loop REST and gRPC callers that only count, and an RSS sampler.

Why not `loadtests.loadgen`: it keeps every latency, so an hour at a thousand requests a second
would grow the load generator by tens of MB; a soak needs only how many requests were answered
and how many failed, next to the gateway's resident memory at the same moment.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError
from gateway.upstream.transport.http1 import Http1Transport
from v2proto.grpc.service import MODEL_INFER

TIMEOUT_S = 5.0  # a client's patience; the gateway's own deadline (timeout_ms) is shorter


@dataclass
class Counts:
    """Requests answered so far: ``ok`` (200, or a gRPC OK) and ``failed`` (anything else)."""

    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def served(self) -> int:
        return self.ok + self.failed

    def fail(self, why: str) -> None:
        self.failed += 1
        self.errors[why] = self.errors.get(why, 0) + 1


@dataclass(frozen=True)
class Sample:
    """The gateway's resident set size after ``requests`` answers, ``t_s`` into the run."""

    t_s: float
    requests: int
    rss_bytes: int


def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` from /proc (Linux), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def rest_load(
    url: str, path: str, body: bytes, counts: Counts, *, concurrency: int, stop_at: float
) -> None:
    """``concurrency`` callers POST ``body`` to ``path`` back to back until ``stop_at``."""
    endpoint = Endpoint.parse(url)
    transport = Http1Transport(max_connections_per_endpoint=concurrency * 2)

    async def caller() -> None:
        while time.monotonic() < stop_at:
            try:
                response = await transport.request(
                    endpoint, "POST", path, body=body, timeout=TIMEOUT_S
                )
            except UpstreamError as exc:
                counts.fail(type(exc).__name__)
                continue
            if response.status == 200:
                counts.ok += 1
            else:
                counts.fail(f"HTTP {response.status}")

    try:
        await asyncio.gather(*(caller() for _ in range(concurrency)))
    finally:
        await transport.aclose()


async def grpc_load(
    target: str, request: bytes, counts: Counts, *, concurrency: int, stop_at: float
) -> None:
    """``concurrency`` callers on one channel (HTTP/2 streams) send the serialized
    ModelInferRequest ``request`` back to back until ``stop_at``; replies are not parsed."""
    async with grpc.aio.insecure_channel(target) as channel:
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(MODEL_INFER.path)

        async def caller() -> None:
            while time.monotonic() < stop_at:
                try:
                    await call(request, timeout=TIMEOUT_S)
                except grpc.aio.AioRpcError as exc:
                    counts.fail(exc.code().name)
                    continue
                counts.ok += 1

        await asyncio.gather(*(caller() for _ in range(concurrency)))


async def sample_rss(
    pid: int, counts: Counts, samples: list[Sample], *, every_s: float, began: float, stop_at: float
) -> None:
    """Appends a `Sample` every ``every_s`` until ``stop_at``, and one last at the end."""
    while True:
        now = time.monotonic()
        samples.append(Sample(now - began, counts.served, rss_bytes(pid)))
        if now >= stop_at:
            return
        await asyncio.sleep(min(every_s, max(0.0, stop_at - now)))

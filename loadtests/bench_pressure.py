"""Large bodies under pressure: the neighbours of a 6 MB stream, and RSS under 32 such clients.

Two benchmarks on the payload stack (`loadtests.payloads`), bounded in time, printing figures:

- **neighbour**: one digits-row client (c1) and a ``/v2/health/live`` prober (every 10 ms) run
  alone, then while another process streams 6 MB binary requests back to back; the small
  client's p99 loaded vs unloaded (target: within 2×) and the prober's worst latency (target:
  never over 5 ms).
- **memory**: 32 concurrent clients (another process) send 6 MB binary requests for 20 s while
  the gateway's RSS is sampled every 20 ms; the peak vs baseline + 2× ``server.inflight_bytes``,
  and RSS 5 s after the load vs baseline (target: back within 10 %). 503s (the budget's
  refusals, with Retry-After) are counted, not retried.

Run: ``make bench`` or ``.venv/bin/python loadtests/bench_pressure.py [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import sys
import threading
import time
from multiprocessing.process import BaseProcess
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config.endpoint import Endpoint
from gateway.errors import UpstreamError
from gateway.upstream.transport.http1 import Http1Transport
from loadtests.loadgen import LoadResult, closed_loop
from loadtests.payloads import BUDGET_BYTES, DIGITS, IMAGE, payload_of, start
from loadtests.stack import Stack


def _stream(url: str, concurrency: int, seconds: float, out: multiprocessing.Queue[str]) -> None:
    """In its own process: ``concurrency`` clients sending 6 MB bodies back to back."""
    big = payload_of("6MB", "binary")
    result = uvloop.run(
        closed_loop(
            url,
            f"/v2/models/{IMAGE}/infer",
            big.body,
            concurrency=concurrency,
            seconds=seconds,
            max_requests=1_000_000,
            headers=big.headers,
            timeout_s=30.0,
        )
    )
    summary = f"{result.requests} requests, {result.rate:.1f} req/s, statuses "
    out.put(summary + f"{dict(result.statuses)}, errors {dict(result.errors)}")


def _start_stream(
    url: str, concurrency: int, seconds: float
) -> tuple[BaseProcess, multiprocessing.Queue[str]]:
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[str] = ctx.Queue()
    proc = ctx.Process(target=_stream, args=(url, concurrency, seconds, out), daemon=True)
    proc.start()
    return proc, out


async def _live_prober(url: str, seconds: float) -> list[float]:
    transport = Http1Transport()
    endpoint = Endpoint.parse(url)
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    try:
        while time.perf_counter() < stop:
            started = time.perf_counter()
            with contextlib.suppress(UpstreamError):
                await transport.request(endpoint, "GET", "/v2/health/live", timeout=5.0)
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
    finally:
        await transport.aclose()
    return latencies


async def _neighbour_phase(
    url: str, control_url: str, seconds: float
) -> tuple[LoadResult, list[float], list[float]]:
    small = payload_of("300B", "json")
    load = closed_loop(
        url,
        f"/v2/models/{DIGITS}/infer",
        small.body,
        concurrency=1,
        seconds=seconds,
        max_requests=1_000_000,
        headers=small.headers,
    )
    result, live, control = await asyncio.gather(
        load, _live_prober(url, seconds), _live_prober(control_url, seconds)
    )
    return result, live, control


def _q(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def neighbour(url: str, control_url: str, seconds: float) -> list[str]:
    """``control_url``: a server of the same kind that the stream does not touch (a digits
    replica, uvicorn on uvloop, serving only its share of the small client's requests), probed
    at the same time: its worst is what the shared machine's scheduling alone costs."""
    alone, live_alone, control_alone = uvloop.run(_neighbour_phase(url, control_url, seconds))
    proc, out = _start_stream(url, 1, seconds + 2)
    time.sleep(1.0)  # the stream is under way
    loaded, live_loaded, control = uvloop.run(_neighbour_phase(url, control_url, seconds))
    proc.join(seconds + 30)
    stream = out.get(timeout=5) if not out.empty() else "no report"
    ratio = loaded.quantile_ms(0.99) / alone.quantile_ms(0.99)
    worst = max(live_loaded) * 1000
    return [
        f"neighbour: small requests alone p50 {alone.quantile_ms(0.5):.2f} ms, "
        f"p99 {alone.quantile_ms(0.99):.2f} ms; beside the 6 MB stream p50 "
        f"{loaded.quantile_ms(0.5):.2f} ms, p99 {loaded.quantile_ms(0.99):.2f} ms",
        f"{'PASS' if ratio <= 2 else 'MISS'} small-request p99 beside a 6 MB stream within 2× of "
        f"alone: {ratio:.2f}×",
        f"{'PASS' if worst <= 5 else 'MISS'} /v2/health/live never over 5 ms beside the stream: "
        f"worst {worst:.2f} ms, p99 {_q(live_loaded, 0.99):.2f} ms (alone: worst "
        f"{max(live_alone) * 1000:.2f} ms) over {len(live_loaded)} probes",
        f"  control, a digits replica's /v2/health/live probed at the same time: worst "
        f"{max(control) * 1000:.2f} ms, p99 {_q(control, 0.99):.2f} ms beside the stream (alone: "
        f"worst {max(control_alone) * 1000:.2f} ms): the machine's own scheduling delays",
        f"  the stream: {stream}",
    ]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def memory(url: str, pid: int, seconds: float, budget: int) -> list[str]:
    warm = payload_of("6MB", "binary")
    uvloop.run(
        closed_loop(
            url,
            f"/v2/models/{IMAGE}/infer",
            warm.body,
            concurrency=2,
            seconds=2.0,
            max_requests=20,
            headers=warm.headers,
        )
    )
    time.sleep(1.0)
    baseline = rss_bytes(pid)
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(rss_bytes(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc, out = _start_stream(url, 32, seconds)
    proc.join(seconds + 60)
    done.set()
    sampler.join()
    stream = out.get(timeout=5) if not out.empty() else "no report"
    after = baseline
    for _ in range(50):  # up to 5 s for the memory to come back
        after = rss_bytes(pid)
        if after <= baseline * 1.1:
            break
        time.sleep(0.1)
    peak = max(samples, default=baseline)
    mib = 1 << 20
    return [
        f"memory: 32 clients × 6 MB for {seconds:g} s: {stream}",
        f"{'PASS' if peak <= baseline + 2 * budget else 'MISS'} RSS never above baseline + 2× "
        f"budget: baseline {baseline / mib:.0f} MiB, peak {peak / mib:.0f} MiB, bound "
        f"{(baseline + 2 * budget) / mib:.0f} MiB (inflight_bytes {budget / mib:.0f} MiB)",
        f"{'PASS' if after <= baseline * 1.1 else 'MISS'} RSS back within 10 % of baseline "
        f"afterwards: {after / mib:.0f} MiB ({after / baseline - 1:+.0%})",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="the 32-client load")
    parser.add_argument("--neighbour-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    with Stack() as stack:
        s = start(stack, BUDGET_BYTES)
        control = s.replicas[DIGITS][0].url  # idle while the stream goes to the image replicas
        lines = neighbour(s.gateway.url, control, args.neighbour_seconds)
        print("\n".join(lines), flush=True)
        print("\n".join(memory(s.gateway.url, s.gateway.pid, args.seconds, BUDGET_BYTES)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Fault benchmark: each fault under steady load, measured from the client's side.

For every scenario a fresh stack starts (three replicas of the primary model with fault
injection, one gateway with default policy), a closed loop of 16 requests in flight with a
1 s deadline runs for ``--steady`` seconds, then the fault is injected and the load goes on
for ``--fault`` seconds. Printed per scenario: requests sent / failed / over deadline, time
from the fault to the first ejection or open breaker, p50/p99/max before and during, and
throughput during the fault relative to before. Run: ``.venv/bin/python
loadtests/bench_faults.py`` (about 90 s). With ``--grpc`` the replicas also serve V2 gRPC and
the pool reaches them over it (``grpc://`` URLs; faults are still injected over their HTTP
port), for the same scenarios over the other transport.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.bench_overhead import MODEL, body
from loadtests.loadgen import LoadResult, closed_loop
from loadtests.results_file import save
from loadtests.stack import ROOT, Proc, Stack, free_port, inject_faults_async, pool_config

DEADLINE_MS = 1000
Inject = Callable[[list[Proc]], Awaitable[None]]


async def _faults(replicas: list[Proc], **faults: Any) -> None:
    for replica in replicas:
        await inject_faults_async(replica, **faults)


async def crash(replicas: list[Proc]) -> None:
    os.kill(replicas[0].pid, signal.SIGKILL)


async def hang(replicas: list[Proc]) -> None:
    await _faults(replicas[:1], hang=True)


async def stop(replicas: list[Proc]) -> None:
    os.kill(replicas[0].pid, signal.SIGSTOP)  # resumed when the load ends (`run_scenario`)


async def half_500(replicas: list[Proc]) -> None:
    await _faults(replicas[:1], error_rate=0.5)


async def slow(replicas: list[Proc]) -> None:
    await _faults(replicas[:1], latency_ms=30)


async def all_500(replicas: list[Proc]) -> None:
    await _faults(replicas, error_rate=1.0)


SCENARIOS: dict[str, tuple[Inject, str]] = {
    "crash (SIGKILL 1 of 3)": (crash, "0 failed, 0 late"),
    "hang (1 of 3)": (hang, "0 failed, 0 late, max ≤ 60 ms, ejected"),
    "stop (SIGSTOP 1 of 3)": (stop, "0 failed, 0 late, max ≤ 60 ms, ejected"),
    "500 on half (1 of 3)": (half_500, "≥ 99.9 % ok, ejected"),
    "slow +30 ms (1 of 3)": (slow, "0 failed, kept (not ejected)"),
    "all 3 answer 500": (all_500, "fast 503 for all"),
}


@dataclass
class Outcome:
    name: str
    goal: str
    sent: int
    failed: int
    late: int
    first_ejection_ms: float | None
    before: tuple[float, float, float, float]  # p50, p99, max (ms), req/s
    during: tuple[float, float, float, float]
    fast_503_p99_ms: float | None


def _phase(result: LoadResult, start: float, end: float) -> tuple[float, float, float, float]:
    picked = [
        lat
        for lat, at in zip(result.latencies_s, result.starts_s, strict=True)
        if start <= at < end
    ]
    if not picked:
        return (float("nan"),) * 4
    ordered = sorted(picked)
    rate = len(picked) / (end - start)
    return (
        ordered[len(ordered) // 2] * 1000,
        ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        ordered[-1] * 1000,
        rate,
    )


async def _watch_ejections(gateway: Proc, since: float, stop: asyncio.Event) -> float | None:
    async with httpx.AsyncClient(trust_env=False) as client:
        while not stop.is_set():
            state = (await client.get(f"{gateway.url}/admin/state", timeout=5)).json()
            for pool in state["pools"]:
                for replica in pool["replicas"]:
                    if replica["ejections"] or replica["breaker"]["state"] != "closed":
                        return (time.perf_counter() - since) * 1000
            await asyncio.sleep(0.02)
    return None


async def _run(
    gateway: Proc, replicas: list[Proc], inject: Inject, steady: float, fault: float
) -> tuple[LoadResult, float | None]:
    payload = body()
    headers = {"x-request-timeout-ms": str(DEADLINE_MS)}
    load = asyncio.ensure_future(
        closed_loop(
            gateway.url,
            "/v2/models/digits/infer",
            payload,
            concurrency=16,
            seconds=steady + fault,
            max_requests=1_000_000,
            headers=headers,
            timeout_s=DEADLINE_MS / 1000 + 2,
        )
    )
    await asyncio.sleep(steady)
    injected = time.perf_counter()
    await inject(replicas)
    stop = asyncio.Event()
    watcher = asyncio.ensure_future(_watch_ejections(gateway, injected, stop))
    result = await load
    stop.set()
    return result, await watcher


def grpc_replica(stack: Stack, name: str) -> tuple[Proc, str]:
    """A replica with faults serving V2 gRPC on a port of its own too, and its ``grpc://`` URL."""
    port, grpc_port = free_port(), free_port()
    argv = [sys.executable, "-m", "replicas.cli", "serve", "--model",
            str(ROOT / "models" / f"{MODEL}.onnx"), "--name", MODEL, "--port", str(port),
            "--grpc-port", str(grpc_port), "--enable-faults"]  # fmt: skip
    proc = stack.start(name, argv, f"http://127.0.0.1:{port}", "/v2/health/ready",
                       stack.fault_key)  # fmt: skip
    return proc, f"grpc://127.0.0.1:{grpc_port}"


def run_scenario(
    name: str,
    inject: Inject,
    goal: str,
    steady: float,
    fault: float,
    grpc: bool = False,
    workers: int = 2,
) -> Outcome:
    with Stack() as stack:
        if grpc:
            started = [grpc_replica(stack, f"r{i}") for i in range(3)]
            replicas = [proc for proc, _ in started]
            config = pool_config(replicas, MODEL)
            for member, (_, url) in zip(config["pools"]["pool"]["replicas"], started, strict=True):
                member["url"] = url
        else:
            replicas = [stack.replica(f"r{i}", MODEL) for i in range(3)]
            config = pool_config(replicas, MODEL)
        gateway = stack.gateway(config, args=["--workers", str(workers)])
        uvloop.run(
            closed_loop(
                gateway.url,
                "/v2/models/digits/infer",
                body(),
                concurrency=16,
                seconds=1.0,
                max_requests=5000,
            )
        )  # warm-up
        try:
            result, ejection_ms = uvloop.run(_run(gateway, replicas, inject, steady, fault))
        finally:
            for replica in replicas:  # a stopped one must run to hear the stack's SIGTERM
                with contextlib.suppress(ProcessLookupError):
                    os.kill(replica.pid, signal.SIGCONT)
    total = steady + fault
    failed = sum(1 for c in result.codes if c != 200)
    late = sum(1 for lat in result.latencies_s if lat * 1000 > DEADLINE_MS)
    fast_503 = sorted(
        lat * 1000
        for lat, c, at in zip(result.latencies_s, result.codes, result.starts_s, strict=True)
        if c == 503 and at >= steady
    )
    return Outcome(
        name=name,
        goal=goal,
        sent=result.requests,
        failed=failed,
        late=late,
        first_ejection_ms=ejection_ms,
        before=_phase(result, 0.0, steady),
        during=_phase(result, steady, total),
        fast_503_p99_ms=fast_503[int(0.99 * (len(fast_503) - 1))] if fast_503 else None,
    )


def render(outcomes: list[Outcome]) -> str:
    lines = [
        "| fault | sent | failed | over deadline | first ejection | p50/p99 before (ms) "
        "| p50/p99/max during (ms) | req/s during vs before | goal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        ejection = f"{o.first_ejection_ms:.0f} ms" if o.first_ejection_ms is not None else "none"
        lines.append(
            f"| {o.name} | {o.sent} | {o.failed} | {o.late} | {ejection} "
            f"| {o.before[0]:.1f} / {o.before[1]:.1f} "
            f"| {o.during[0]:.1f} / {o.during[1]:.1f} / {o.during[2]:.0f} "
            f"| {o.during[3] / o.before[3]:.0%} | {o.goal} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", type=float, default=3.0)
    parser.add_argument("--fault", type=float, default=5.0)
    parser.add_argument("--only", help="run only scenarios whose name contains this")
    parser.add_argument("--grpc", action="store_true", help="the pool's replicas over V2 gRPC")
    parser.add_argument("--workers", type=int, default=2, help="the gateway's data-plane workers")
    args = parser.parse_args(argv)
    outcomes = []
    for name, (inject, goal) in SCENARIOS.items():
        if args.only and args.only not in name:
            continue
        outcome = run_scenario(name, inject, goal, args.steady, args.fault, args.grpc, args.workers)
        print(render([outcome]).splitlines()[-1], flush=True)
        outcomes.append(outcome)
    print()
    print(render(outcomes))
    save("faults-grpc" if args.grpc else "faults", render(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

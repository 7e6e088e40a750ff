"""What probing and sampling 32 replicas at 10 Hz costs each data-plane worker, at idle.

The control process owns health probes and accelerator sampling; a worker's loop carries none
of it, only the snapshots the control publishes. This starts the 32 replica stand-ins of
`loadtests/bench_accelerator.py` (each a replica's DCGM page, changing every 0.1 s, and a small
infer answer), a ``gateway serve --workers N`` probing and sampling every one of them every
0.1 s, lets it settle, then reads each process's CPU seconds (``/proc``, user and system, its
threads included) over ``--seconds`` without requests: every worker's share of one core, and
the control process's beside it (where the probing and sampling run). The bound (issue 39):
0.5 % of a core per worker.

``--latency`` measures the other half of the bound: the c16 latency of requests to another
model (over the echo upstream of `loadtests/bench_scaling.py`, so that the upstream costs
almost nothing) with the 32 replicas probed and sampled at 10 Hz ("on") and with the same 32
replicas probed at the default interval and not sampled ("off"), alternating off, on for
``--rounds`` rounds; each gateway is started, settled, warmed up, measured with wrk and stopped.
The bound: the median p99 on within 5 % of off.

    .venv/bin/python loadtests/bench_isolation.py [--workers 2] [--seconds 30]
    .venv/bin/python loadtests/bench_isolation.py --latency [--workers 2] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.bench_overhead import body
from loadtests.bench_scaling import DIRECT_PATH, GATEWAY_PATH, MODEL, echo
from loadtests.results_file import save
from loadtests.stack import ROOT, Proc, Stack, worker_pids
from loadtests.wrk_runner import WrkResult, run_wrk

REPLICAS = 32
INTERVAL_S = 0.1  # probes and samples: 10 Hz
SETTLE_S = 5.0  # after the gateway answers: the first snapshots, connections, metadata
WORKER_BOUND = 0.005  # of one core, each worker
P99_BOUND = 1.05  # sampling on over off, median p99 at c16
WARMUP_S = 2.0  # wrk before each measurement


def config(ports: list[int], sampling: bool = True) -> dict[str, Any]:
    """The 32 replicas' pool: probed and sampled every 0.1 s, or (``sampling`` False) probed at
    the default interval and not sampled."""
    replicas = [{"id": f"r{i}", "url": f"http://127.0.0.1:{port}"} for i, port in enumerate(ports)]
    pool: dict[str, Any] = {"model": "m", "replicas": replicas}
    if sampling:
        pool["health"] = {"interval_s": INTERVAL_S}
        pool["accelerator"] = {"interval_s": INTERVAL_S}
    return {"pools": {"p": pool}, "models": {"m": {"pool": "p"}}}


def with_echo(base: dict[str, Any], upstream: Proc) -> dict[str, Any]:
    """``base`` and the model the load goes to: ``digits``, one entry, the echo upstream."""
    base["pools"]["echo"] = {"model": MODEL, "replicas": [{"id": "echo", "url": upstream.url}]}
    base["models"]["digits"] = {"pool": "echo"}
    return base


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (all its threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_stand_ins() -> tuple[subprocess.Popen[str], list[int]]:
    """The 32 replica stand-ins (one process) and their ports."""
    stand_ins = subprocess.Popen(
        [sys.executable, str(ROOT / "loadtests" / "bench_accelerator.py"), "--serve",
         "--replicas", str(REPLICAS), "--change-s", str(INTERVAL_S)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert stand_ins.stdout is not None
    return stand_ins, json.loads(stand_ins.stdout.readline())[:REPLICAS]


def stop_stand_ins(stand_ins: subprocess.Popen[str]) -> None:
    stand_ins.terminate()
    stand_ins.wait(timeout=10)


def measure(workers: int, seconds: float) -> dict[str, float]:
    """Each process's share of one core over ``seconds`` at idle: ``control``, ``worker-N``."""
    stand_ins, ports = start_stand_ins()
    try:
        with Stack() as stack:
            gateway = stack.gateway(config(ports), args=["--workers", str(workers)])
            time.sleep(SETTLE_S)
            pids = {"control": gateway.pid}
            pids.update({f"worker-{i}": pid for i, pid in enumerate(worker_pids(gateway.url))})
            before = {name: cpu_s(pid) for name, pid in pids.items()}
            started = time.monotonic()
            time.sleep(seconds)
            after = {name: cpu_s(pid) for name, pid in pids.items()}
            wall = time.monotonic() - started
            return {name: (after[name] - before[name]) / wall for name in pids}
    finally:
        stop_stand_ins(stand_ins)


def latency(workers: int, seconds: float, rounds: int) -> list[tuple[str, WrkResult]]:
    """wrk at c16 (2 threads) to ``digits`` for ``seconds``, sampling off then on, ``rounds``
    times: (``"off"`` or ``"on"``, the result) in the order measured."""
    stand_ins, ports = start_stand_ins()
    out = []
    try:
        with Stack() as stack:
            upstream = echo(stack)
            body_file = stack.workdir / "body.json"
            body_file.write_bytes(body())
            c16(upstream.url + DIRECT_PATH, WARMUP_S, body_file)
            for _ in range(rounds):
                for setting in ("off", "on"):
                    cfg = with_echo(config(ports, sampling=setting == "on"), upstream)
                    gateway = stack.gateway(cfg, args=["--workers", str(workers)])
                    try:
                        time.sleep(SETTLE_S)
                        url = gateway.url + GATEWAY_PATH
                        c16(url, WARMUP_S, body_file)
                        out.append((setting, c16(url, seconds, body_file)))
                    finally:
                        stack.end(gateway)
    finally:
        stop_stand_ins(stand_ins)
    return out


def c16(url: str, seconds: float, body_file: Path) -> WrkResult:
    return run_wrk(url, threads=2, connections=16, seconds=seconds, body_file=body_file)


def medians(runs: list[tuple[str, WrkResult]], field: str) -> dict[str, float]:
    """``field`` (``p50_ms``, ``p99_ms``) of each setting's runs, their median."""
    return {s: median(getattr(r, field) for name, r in runs if name == s) for s in ("off", "on")}


def latency_table(runs: list[tuple[str, WrkResult]], workers: int, seconds: float) -> str:
    lines = [
        f"c16 (wrk, 2 threads) to one model over the echo upstream, {seconds:g} s a run, "
        f"{workers} worker(s); beside it {REPLICAS} replicas probed and sampled every "
        f"{INTERVAL_S:g} s (on) or probed at the default interval, not sampled (off)",
        "",
        "| run | sampling | req/s | p50 ms | p99 ms | failed |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for i, (setting, r) in enumerate(runs, 1):
        lines.append(
            f"| {i} | {setting} | {r.rate:,.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} | {r.failures} |"
        )
    p99, p50 = medians(runs, "p99_ms"), medians(runs, "p50_ms")
    lines += [
        "",
        f"median p50 off {p50['off']:.2f} ms, on {p50['on']:.2f} ms; median p99 off "
        f"{p99['off']:.2f} ms, on {p99['on']:.2f} ms: on / off = {p99['on'] / p99['off']:.3f} "
        f"(bound {P99_BOUND:g})",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--latency", action="store_true", help="c16 p99, sampling on and off")
    parser.add_argument("--rounds", type=int, default=3, help="--latency: off/on pairs")
    args = parser.parse_args(argv)
    if args.latency:
        runs = latency(args.workers, args.seconds, args.rounds)
        table = latency_table(runs, args.workers, args.seconds)
        print(table)
        print(f"saved {save('isolation-latency', table)}")
        p99 = medians(runs, "p99_ms")
        failed = sum(r.failures for _, r in runs)
        return 1 if failed or p99["on"] > P99_BOUND * p99["off"] else 0
    shares = measure(args.workers, args.seconds)
    lines = [
        f"{REPLICAS} replicas probed and sampled every {INTERVAL_S:g} s, no requests, "
        f"{args.seconds:g} s (CPU seconds from /proc)",
        "",
        "| process | share of one core | bound |",
        "|---|---:|---:|",
    ]
    for name, share in shares.items():
        bound = f"{WORKER_BOUND:.1%}" if name.startswith("worker") else "-"
        lines.append(f"| {name} | {share:.2%} | {bound} |")
    table = "\n".join(lines)
    print(table)
    print(f"saved {save('isolation', table)}")
    over = [n for n, s in shares.items() if n.startswith("worker") and s > WORKER_BOUND]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())

"""What probing and sampling 32 replicas at 10 Hz costs each data-plane worker, at idle.

The control process owns health probes and accelerator sampling; a worker's loop carries none
of it, only the snapshots the control publishes. This starts the 32 replica stand-ins of
`loadtests/bench_accelerator.py` (each a replica's DCGM page, changing every 0.1 s, and a small
infer answer), a ``gateway serve --workers N`` probing and sampling every one of them every
0.1 s, lets it settle, then reads each process's CPU seconds (``/proc``, user and system, its
threads included) over ``--seconds`` without requests: every worker's share of one core, and
the control process's beside it (where the probing and sampling run). The bound (issue 39):
0.5 % of a core per worker.

    .venv/bin/python loadtests/bench_isolation.py [--workers 2] [--seconds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.results_file import save
from loadtests.stack import ROOT, Stack

REPLICAS = 32
INTERVAL_S = 0.1  # probes and samples: 10 Hz
SETTLE_S = 5.0  # after the gateway answers: the first snapshots, connections, metadata
WORKER_BOUND = 0.005  # of one core, each worker


def config(ports: list[int]) -> dict[str, Any]:
    replicas = [{"id": f"r{i}", "url": f"http://127.0.0.1:{port}"} for i, port in enumerate(ports)]
    pool = {"model": "m", "replicas": replicas, "health": {"interval_s": INTERVAL_S},
            "accelerator": {"interval_s": INTERVAL_S}}  # fmt: skip
    return {"pools": {"p": pool}, "models": {"m": {"pool": "p"}}}


def cpu_s(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (all its threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pids(url: str) -> list[int]:
    state = httpx.get(f"{url}/admin/state", trust_env=False, timeout=30).json()
    return [int(worker["pid"]) for worker in state["workers"]["workers"]]


def measure(workers: int, seconds: float) -> dict[str, float]:
    """Each process's share of one core over ``seconds`` at idle: ``control``, ``worker-N``."""
    stand_ins = subprocess.Popen(
        [sys.executable, str(ROOT / "loadtests" / "bench_accelerator.py"), "--serve",
         "--replicas", str(REPLICAS), "--change-s", str(INTERVAL_S)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert stand_ins.stdout is not None
        ports = json.loads(stand_ins.stdout.readline())[:REPLICAS]
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
        stand_ins.terminate()
        stand_ins.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
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

"""CPU per request as instructions: each proxy under callgrind, the same requests through each.

CPU seconds per request on a shared virtual machine vary by 15 % and more from run to run,
which hides any change smaller than that (``loadtests/bench_overhead.py``). The instructions a
process executes do not depend on what else the machine runs: callgrind counts them, the same
for the same inputs. Each target (the gateway on one replica and on a pool of three entries,
the minimal Python proxy, nginx) runs under ``valgrind --tool=callgrind`` with counting off
while it starts; counting is switched on, ``WARM`` requests warm it, then the counters are
zeroed, ``REQUESTS`` requests are sent at ``CONCURRENCY`` to the one real replica, and the
total is dumped. An idle window as long as the busy one is counted next and taken off in
proportion (background tasks: probes, samplers), as in ``loadtests/bench_calls.py``.

Instructions are not time (a cache miss costs no instruction), so this is the ratio of work,
not of seconds; both are printed in ``make bench``'s runs beside each other. Under callgrind a
process runs some fifty times slower, so the counts are of few requests and the run takes a
few minutes. Run: ``.venv/bin/python loadtests/bench_instructions.py``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.bench_overhead import MODEL, body, floor
from loadtests.loadgen import LoadResult, closed_loop
from loadtests.results_file import save
from loadtests.stack import Proc, Stack, pool_config

REQUESTS = 400  # per target, counted
WARM = 100  # per target, before the count: connections, caches, the schema
CONCURRENCY = 16
WINDOW_CAP_S = 300.0  # a window stops here even if fewer requests were sent (then said)
READY_S = 600.0  # a Python process under callgrind takes a minute or more to start
_TOTALS = re.compile(rb"^(?:totals|summary):\s*(\d+)", re.MULTILINE)


def valgrind_argv(out_dir: Path) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",  # not while it imports and starts: switched on for the windows
        f"--callgrind-out-file={out_dir}/cg.%p",
    ]


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def _dumped(out_dir: Path, pid: int, before: set[Path]) -> int:
    """The total instructions of the dump ``callgrind_control -d`` just wrote."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        new = sorted(set(out_dir.glob(f"cg.{pid}*")) - before, key=lambda p: p.stat().st_mtime)
        for path in reversed(new):
            found = _TOTALS.search(path.read_bytes())
            if found:
                return int(found.group(1))
        time.sleep(0.2)
    raise RuntimeError(f"no callgrind dump of {pid} in {out_dir}")


def count(proc: Proc, out_dir: Path, url: str, path: str, payload: bytes) -> dict[str, Any]:
    """Instructions per request of ``proc`` (under callgrind), the idle rate taken off."""
    pid = proc.process.pid
    _control("-i", "on", str(pid))
    _load(url, path, payload, WARM)
    _control("-z", str(pid))
    before = set(out_dir.glob(f"cg.{pid}*"))
    started = time.monotonic()
    result = _load(url, path, payload, REQUESTS)
    wall = time.monotonic() - started
    _control("-d", str(pid))
    busy = _dumped(out_dir, pid, before)
    _control("-z", str(pid))
    before = set(out_dir.glob(f"cg.{pid}*"))
    time.sleep(wall)
    _control("-d", str(pid))
    idle = _dumped(out_dir, pid, before)
    ok = result.statuses.get(200, 0)
    if ok != result.requests or result.errors:
        print(f"warning: {proc.name}: {dict(result.statuses)} {dict(result.errors)}")
    return {
        "requests": result.requests,
        "wall_s": round(wall, 1),
        "idle_per_s": round(idle / wall),
        "per_request": round((busy - idle) / max(1, result.requests)),
    }


def _load(url: str, path: str, payload: bytes, n: int) -> LoadResult:
    return uvloop.run(
        closed_loop(
            url, path, payload, concurrency=CONCURRENCY, seconds=WINDOW_CAP_S, max_requests=n,
            timeout_s=60.0,
        )
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="only this target (repeatable)")
    parser.add_argument(
        "--keep", type=Path, help="copy the callgrind dumps here (for callgrind_annotate)"
    )
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed: apt-get install valgrind")
        return 2
    payload = body()
    rows: dict[str, dict[str, Any]] = {}
    with Stack() as stack:
        out_dir = stack.workdir / "callgrind"
        out_dir.mkdir()
        under = {"wrap": valgrind_argv(out_dir), "ready_timeout_s": READY_S}
        replica = stack.replica("replica-0", MODEL, faults=False)
        one = pool_config([replica], MODEL)
        three = pool_config([replica], MODEL)
        three["pools"]["pool"]["replicas"] = [{"id": f"r{i}", "url": replica.url} for i in range(3)]
        gateway_path, direct_path = "/v2/models/digits/infer", f"/v2/models/{MODEL}/infer"
        targets = {
            "gateway": lambda: (stack.gateway(one, **under), gateway_path),
            "gateway[3 entries]": lambda: (
                stack.gateway(three, name="gateway-3", **under),
                gateway_path,
            ),
            "floor": lambda: (floor(stack, replica, **under), direct_path),
            "nginx": lambda: (stack.nginx([replica.url], **under), direct_path),
        }
        for name, start in targets.items():
            if args.only and name not in args.only:
                continue
            proc, path = start()
            if proc is None:
                print(f"{name}: not installed, skipped")
                continue
            rows[name] = count(proc, out_dir, proc.url, path, payload)
            print(f"{name}: {rows[name]}", flush=True)
        if args.keep is not None:
            shutil.copytree(out_dir, args.keep, dirs_exist_ok=True)
    table = _table(rows)
    print(f"\nInstructions per request (callgrind, c{CONCURRENCY}, one digits row, JSON):")
    print(table)
    if not args.only:
        print(f"saved {save('instructions', table)}")
    return 0


def _table(rows: dict[str, dict[str, Any]]) -> str:
    nginx = rows.get("nginx", {}).get("per_request")
    least = rows.get("floor", {}).get("per_request")
    lines = ["| target | instructions/request | × nginx | × floor |", "|---|---:|---:|---:|"]
    for name, row in rows.items():
        n = row["per_request"]
        vs_nginx = f"{n / nginx:.2f}" if nginx else "-"
        vs_floor = f"{n / least:.2f}" if least else "-"
        lines.append(f"| {name} | {n:,} | {vs_nginx} | {vs_floor} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""CPU per request as instructions: each proxy under callgrind, the same requests through each.

CPU seconds per request on a shared virtual machine vary by 15 % and more from run to run, which
hides any change smaller than that (``loadtests/bench_overhead.py``). The instructions a process
executes do not depend on what else the machine runs: callgrind counts them, the same for the
same inputs. Each target (the gateway's data-plane worker, with one replica and with a pool of
three entries, the minimal Python proxy, nginx, and uvicorn answering a fixed reply with no
upstream: the server's own floor, `loadtests/uvicorn_floor.py`, beside the data plane's lean
server doing the same, `loadtests/lean_floor.py`) runs under ``valgrind --tool=callgrind`` with
counting off while it starts; counting is switched on, ``WARM`` requests warm it, then the
counters are zeroed, ``REQUESTS`` requests are sent at ``CONCURRENCY`` to the one real replica,
and the total is dumped. The background's rate (probes, samplers), counted in a window without
requests before, is taken off for the requests' window's length (`count`); the share taken off
is printed. Under callgrind a loaded machine stretches the window, and with it that share, the
one part of the figure that is estimated rather than counted.

Instructions are not time (a cache miss costs no instruction), so this is the ratio of work, not
of seconds; both are printed in ``make bench``'s runs beside each other. Under callgrind a
process runs some fifty times slower, so the counts are of few requests and the run takes a few
minutes. Run: ``.venv/bin/python loadtests/bench_instructions.py``.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.control.plane import WORKER_PREFIX_ENV
from loadtests.bench_overhead import MODEL, body, floor
from loadtests.gateway_counters import scrape
from loadtests.loadgen import LoadResult, closed_loop
from loadtests.results_file import save
from loadtests.stack import ROOT, Proc, Stack, free_port, pool_config

REQUESTS = 400  # per target, counted
WARM = 100  # per target, before the count: connections, caches, the schema
CONCURRENCY = 16
PROBE_INTERVAL_S = 5.0  # the gateways' health probes (0.5 s by default): requests are counted
IDLE_S = 5.0  # the background's window
SETTLE_S = 2.0  # before the background's window, and after the requests' (counted in it)
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


def count(
    pid: int,
    name: str,
    out_dir: Path,
    url: str,
    path: str,
    payload: bytes,
    *,
    gateway: bool = False,
) -> dict[str, Any]:
    """Instructions per request of ``proc`` (under callgrind), its background rate taken off.

    The background rate (probes, samplers) is counted first, in a window without requests;
    then the warm-up; the requests' window runs on for ``SETTLE_S`` after the last answer, so
    work a request leaves for later (a sampler folding it) counts as its own.
    """
    _control("-i", "on", str(pid))
    time.sleep(SETTLE_S)
    idle, idle_wall = _window(out_dir, pid, lambda: time.sleep(IDLE_S))
    # Right before the count: a replica closes connections idle for its keep-alive timeout
    # (uvicorn's 5 s), and the minimal proxy has no answer to that but a client's timeout.
    _load(url, path, payload, WARM)
    result: list[LoadResult] = []

    def busy() -> None:
        result.append(_load(url, path, payload, REQUESTS))
        time.sleep(SETTLE_S)

    tries = _tries(url) if gateway else (0.0, 0.0)
    total, wall = _window(out_dir, pid, busy)
    load = result[0]
    if gateway:  # the per-try race's timing decides how many attempts a request makes
        after = _tries(url)
        attempts, slow = (after[0] - tries[0], after[1] - tries[1])
    if load.statuses.get(200, 0) != load.requests or load.errors:
        print(f"warning: {name}: {dict(load.statuses)} {dict(load.errors)}")
    background = idle / idle_wall * wall
    return {
        "requests": load.requests,
        "wall_s": round(wall, 1),
        "idle_per_s": round(idle / idle_wall),
        "per_request": round((total - background) / max(1, load.requests)),
        "idle_share": round(background / total, 3),  # what was taken off
        **(
            {
                "attempts_per_request": round(attempts / max(1, load.requests), 3),
                "per_try_timeouts": int(slow),
            }
            if gateway
            else {}
        ),
    }


def worker_pid(url: str) -> int:
    """The PID of a gateway's one data-plane worker (its ``/admin/state``)."""
    state = httpx.get(f"{url}/admin/state", trust_env=False, timeout=30).json()
    (worker,) = state["workers"]["workers"]
    return int(worker["pid"])


def _tries(url: str) -> tuple[float, float]:
    """The gateway's upstream attempts and per-try timeouts so far (its /metrics)."""
    counters = scrape(url)

    def total(name: str) -> float:
        return sum(n for (series, _), n in counters.items() if series == name)

    attempts = total("gateway_upstream_attempts_total")
    return attempts, total("gateway_upstream_per_try_timeouts_total")


def _window(out_dir: Path, pid: int, work: Callable[[], None]) -> tuple[int, float]:
    """Instructions ``pid`` ran while ``work`` ran, and how long that took."""
    _control("-z", str(pid))
    before = set(out_dir.glob(f"cg.{pid}*"))
    started = time.monotonic()
    work()
    wall = time.monotonic() - started
    _control("-d", str(pid))
    return _dumped(out_dir, pid, before), wall


def _load(url: str, path: str, payload: bytes, n: int) -> LoadResult:
    return uvloop.run(
        closed_loop(
            url,
            path,
            payload,
            concurrency=CONCURRENCY,
            seconds=WINDOW_CAP_S,
            max_requests=n,
            timeout_s=60.0,
        )
    )


def server_floor(stack: Stack, **start: Any) -> Proc:
    """uvicorn as the gateway runs it, answering a fixed reply (`loadtests/uvicorn_floor.py`):
    what a uvicorn-based gateway pays per request before any work of its own."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "loadtests" / "uvicorn_floor.py"), "--port", str(port)]
    return stack.start("uvicorn-floor", argv, f"http://127.0.0.1:{port}", "/ready", **start)


def lean_floor(stack: Stack, **start: Any) -> Proc:
    """The data plane's own server (`gateway.worker.http`) answering the same fixed reply
    (`loadtests/lean_floor.py`): what a worker pays per request before any work of its own."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "loadtests" / "lean_floor.py"), "--port", str(port)]
    return stack.start("lean-floor", argv, f"http://127.0.0.1:{port}", "/ready", **start)


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
        under: dict[str, Any] = {"wrap": valgrind_argv(out_dir), "ready_timeout_s": READY_S}
        replica = stack.replica("replica-0", MODEL, faults=False)
        one = pool_config([replica], MODEL)
        three = pool_config([replica], MODEL)
        three["pools"]["pool"]["replicas"] = [{"id": f"r{i}", "url": replica.url} for i in range(3)]
        for config in (one, three):  # fewer probes: less background to estimate and take off
            config["pools"]["pool"]["health"] = {"interval_s": PROBE_INTERVAL_S}
        gateway_path, direct_path = "/v2/models/digits/infer", f"/v2/models/{MODEL}/infer"
        # a gateway's requests run in its data-plane worker: that process runs under callgrind
        workers = {
            "env": {WORKER_PREFIX_ENV: shlex.join(valgrind_argv(out_dir))},
            "ready_timeout_s": READY_S,
        }
        targets = {
            "gateway": lambda: (stack.gateway(one, **workers), gateway_path),
            "gateway[3 entries]": lambda: (
                stack.gateway(three, name="gateway-3", **workers),
                gateway_path,
            ),
            "floor": lambda: (floor(stack, replica, **under), direct_path),
            "nginx": lambda: (stack.nginx([replica.url], **under), direct_path),
            "uvicorn, no upstream": lambda: (server_floor(stack, **under), direct_path),
            "lean server, no upstream": lambda: (lean_floor(stack, **under), direct_path),
        }
        for name, start in targets.items():
            if args.only and name not in args.only:
                continue
            proc, path = start()
            if proc is None:
                print(f"{name}: not installed, skipped")
                continue
            gateway = path == gateway_path
            pid = worker_pid(proc.url) if gateway else proc.process.pid
            rows[name] = count(pid, name, out_dir, proc.url, path, payload, gateway=gateway)
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
    lines = [
        "| target | instructions/request | × nginx | × floor | idle taken off |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        n = row["per_request"]
        vs_nginx = f"{n / nginx:.2f}" if nginx else "-"
        vs_floor = f"{n / least:.2f}" if least else "-"
        idle = f"{row['idle_share']:.1%}"
        lines.append(f"| {name} | {n:,} | {vs_nginx} | {vs_floor} | {idle} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

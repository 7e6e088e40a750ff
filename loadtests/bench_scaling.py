"""Scaling benchmark: requests/s over an upstream that costs almost nothing, wrk as the load.

One run, one upstream (``loadtests/echo_upstream.py``: a bare uvloop + httptools V2 server with a
fixed answer that echoes the request's id), one request (a digits row as JSON, wrk's Lua POST in
``loadtests/wrk/infer.lua``), measured at c16 (2 wrk threads) and at c1 against, one at a time:
the upstream directly; nginx with one worker in front of it; the minimal Python proxy; the
gateway as one process ("single": ``gateway serve``, one pool with one replica entry, the plain
route); and, where ``gateway serve`` has ``--workers``, the gateway with 1 and 2 data-plane
workers (and 8 on a machine with 16 CPUs or more). Each proxy runs alone: it is started,
warmed up, measured and stopped before the next one starts, on CPUs of its own where the
machine has more than it needs (`Pinning`; ``--no-pin``: every process on every CPU).

Prints requests/s, p50/p99 latency, failures (answers ≥ 400, socket errors, timeouts: all must
be 0; the exit status is 1 otherwise) and the CPU each target used per request (from /proc,
its child processes included), then the ratios issue 39 asks for: 2 workers ÷ 1, 1 worker ÷
the single process, 8 ÷ 1, and the gateway's c1 p50 over direct. The single process is
measured in the same run: this tree's gateway while ``gateway serve`` has no ``--workers``;
once it has, another commit's (`loadtests.baseline`: ``--baseline REF``, by default main's last
commit before ``--workers`` reached the CLI). Run: ``make bench`` or
``.venv/bin/python loadtests/bench_scaling.py [--seconds 10] [--baseline REF]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests import baseline
from loadtests.bench_overhead import body, floor
from loadtests.results_file import save
from loadtests.scaling_table import SINGLE, Row, medians, render
from loadtests.stack import (
    ROOT,
    Proc,
    Stack,
    cpu_seconds,
    free_port,
    own_cpu_seconds,
    pool_config,
)
from loadtests.wrk_runner import WrkResult, run_wrk, wrk_binary

MODEL = "digits-mlp"  # the echo upstream's one model
DIRECT_PATH = f"/v2/models/{MODEL}/infer"
GATEWAY_PATH = "/v2/models/digits/infer"
MANY_WORKERS_CPUS = 16  # from this many CPUs up, 8 workers are measured too


@dataclass(frozen=True)
class Load:
    """What wrk sends: ``threads`` and ``connections`` for the main level (c1 uses 1 and 1)."""

    threads: int
    connections: int
    seconds: float
    warmup_s: float
    c1_seconds: float
    body_file: Path


@dataclass(frozen=True)
class Target:
    name: str
    path: str
    # ``wrap``: the command it runs under (its CPUs: `Pinning`)
    start: Callable[[list[str]], Proc | None]  # None: not available here (a note says why)
    missing: str = ""
    # the CPUs it is given where the machine has more (`Pinning`)
    cores: int = 1
    # a gateway with data-plane workers: its control process's CPU is told apart
    workers: bool = False


class Pinning:
    """Which CPUs each side runs on: a target on the first ``cores`` CPUs this process may
    use, wrk and the echo upstream on the others, so that neither takes the other's time and
    one run's figures are those of the next (on the 2-CPU machine, unpinned, the same ratio
    moved by 0.3 from run to run). A target that needs every CPU (2 workers on 2) runs
    unpinned, beside wrk and the upstream, as does everything with ``--no-pin``."""

    def __init__(self, enabled: bool, upstream_pid: int, cpus: list[int] | None = None) -> None:
        self.cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
        self.enabled = enabled and shutil.which("taskset") is not None
        self._upstream = upstream_pid

    def split(self, cores: int) -> tuple[list[int], list[int]]:
        """The target's CPUs and the load's, for a target of ``cores``."""
        if not self.enabled or cores >= len(self.cpus):
            return self.cpus, self.cpus
        return self.cpus[:cores], self.cpus[cores:]

    def wrap(self, cores: int) -> list[str]:
        """The command a target of ``cores`` runs under; wrk and the upstream moved aside."""
        mine, load = self.split(cores)
        os.sched_setaffinity(0, load)  # wrk, started from here, inherits it
        _move(self._upstream, load)
        return ["taskset", "-c", ",".join(map(str, mine))]

    def direct(self) -> None:
        """The upstream measured alone: it is the target, on the first CPU; wrk on the rest."""
        mine, load = self.split(1)
        os.sched_setaffinity(0, load)
        _move(self._upstream, mine)

    def note(self) -> str:
        if not self.enabled:
            return "pinned: no (--no-pin, or no taskset): every process on every CPU"
        return (
            f"pinned (taskset): each target on the first n of the {len(self.cpus)} CPUs, wrk "
            "and the echo upstream on the others; n = 1 for nginx, the floor, the single "
            "process, the upstream alone (direct) and 1 worker (its control process beside "
            "it), n = the workers otherwise; a target that needs every CPU runs unpinned"
        )


def _move(pid: int, cpus: list[int]) -> None:
    """Every thread of ``pid`` onto ``cpus``."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


def echo(stack: Stack, model: str = MODEL) -> Proc:
    """The echo upstream, started and ready."""
    port = free_port()
    argv = [sys.executable, str(ROOT / "loadtests" / "echo_upstream.py"), "--port", str(port)]
    argv += ["--model", model]
    return stack.start("echo", argv, f"http://127.0.0.1:{port}", "/v2/health/ready")


def gateway_config(upstream: Proc, entries: int) -> dict[str, Any]:
    """One pool of ``entries`` replica entries, all the one upstream; the plain route."""
    config = pool_config([upstream], MODEL)
    replicas = [{"id": f"echo-{i}", "url": upstream.url} for i in range(entries)]
    config["pools"]["pool"]["replicas"] = replicas
    return config


def start_gateway(
    stack: Stack,
    upstream: Proc,
    entries: int,
    name: str,
    tree: Path,
    args: list[str],
    wrap: list[str] | None = None,
) -> Proc:
    """``tree``'s ``gateway serve`` (this checkout's or another commit's) with ``args``,
    under ``wrap`` (its CPUs)."""
    config = gateway_config(upstream, entries)
    env = baseline.python_env(tree)
    return stack.gateway(config, name=name, env=env, args=args, cwd=tree, wrap=wrap or [])


def measure(
    proc: Proc,
    url: str,
    threads: int,
    connections: int,
    seconds: float,
    body_file: Path,
    split: bool = False,
) -> tuple[WrkResult, float | None, float | None]:
    """wrk's result against ``url``, ``proc``'s CPU per request meanwhile (its children's
    included) and, if ``split``, its own process's alone (a gateway's control process)."""
    before = cpu_seconds(proc.pid)
    own = own_cpu_seconds(proc.pid) if split else 0.0
    result = run_wrk(
        url, threads=threads, connections=connections, seconds=seconds, body_file=body_file
    )
    if not result.requests:
        return result, None, None
    per = 1e6 / result.requests
    control = (own_cpu_seconds(proc.pid) - own) * per if split else None
    return result, (cpu_seconds(proc.pid) - before) * per, control


def run_target(name: str, proc: Proc, path: str, load: Load, split: bool = False) -> list[Row]:
    """``proc`` warmed up, then measured at the main level and at c1 (``split``: its own
    process's CPU told apart from its children's)."""
    url = proc.url + path
    run_wrk(
        url,
        threads=load.threads,
        connections=load.connections,
        seconds=load.warmup_s,
        body_file=load.body_file,
    )
    rows = []
    for threads, connections, seconds in (
        (load.threads, load.connections, load.seconds),
        (1, 1, load.c1_seconds),
    ):
        result, cpu, control = measure(
            proc, url, threads, connections, seconds, load.body_file, split
        )
        if result.failures:
            print(f"warning: {name} c{connections}: {result.failures} failed {result.errors}")
        rows.append(Row(name, connections, result, cpu, control))
    return rows


def single_tree(
    ref: str | None, workers_here: bool, workdir: Path, given: Path | None = None
) -> tuple[Path | None, str]:
    """Where the single-process gateway comes from, and a line that says which it is."""
    if given is not None:
        return given, f"single: the gateway of the tree in {given} (--single-tree)"
    if ref is None and not workers_here:
        return ROOT, "single: this tree's gateway (its `gateway serve` has no --workers)"
    commit = baseline.resolve(ref) if ref is not None else baseline.first_without_workers()
    if commit is None:
        return None, (
            "single: not measured (no commit before --workers found: pass --baseline REF)"
        )
    tree = baseline.extract(commit, workdir / "single")
    line = f"single: commit {commit[:12]}'s gateway (extracted with git archive)"
    if baseline.supports_workers(tree):
        line += "; warning: that commit has --workers, so this is its default, not one process"
    return tree, line


def worker_counts(spec: str | None, workers_here: bool) -> list[int]:
    if not workers_here:
        return []
    if spec is not None:
        return [int(n) for n in spec.split(",")]
    return [1, 2, 8] if (os.cpu_count() or 1) >= MANY_WORKERS_CPUS else [1, 2]


def targets(
    stack: Stack, upstream: Proc, args: argparse.Namespace, notes: list[str]
) -> list[Target]:
    """The proxies in front of ``upstream``, each started when its turn comes."""
    workers_here = baseline.supports_workers()
    tree, line = single_tree(args.baseline, workers_here, stack.workdir, args.single_tree)
    notes.append(line)
    entries = args.entries
    out = [
        Target(
            "nginx",
            DIRECT_PATH,
            lambda wrap: stack.nginx([upstream.url], pinned=wrap),
            "nginx: not installed (WITH_NGINX=1 bash .ci/system-deps.sh)",
        ),
        Target("floor", DIRECT_PATH, lambda wrap: floor(stack, upstream, wrap=wrap)),
    ]
    if tree is not None:
        out.append(
            Target(
                SINGLE,
                GATEWAY_PATH,
                lambda wrap: start_gateway(stack, upstream, entries, "single", tree, [], wrap),
            )
        )
    counts = worker_counts(args.workers, workers_here)
    if not counts:
        notes.append("workers: not measured (this tree's `gateway serve` has no --workers)")
    for n in counts:
        out.append(
            Target(
                f"gateway {n} worker{'s' if n > 1 else ''}",
                GATEWAY_PATH,
                _workers(stack, upstream, entries, n),
                cores=n,
                workers=True,
            )
        )
    return out


def _workers(stack: Stack, upstream: Proc, entries: int, n: int) -> Callable[[list[str]], Proc]:
    return lambda wrap: start_gateway(
        stack, upstream, entries, f"workers-{n}", ROOT, ["--workers", str(n)], wrap
    )


def one_round(
    stack: Stack,
    upstream: Proc,
    plan: list[Target],
    load: Load,
    notes: list[str],
    pinning: Pinning,
) -> list[Row]:
    """Direct, then each target in turn: started, measured, stopped."""
    pinning.direct()
    rows = run_target("direct", upstream, DIRECT_PATH, load)
    for target in plan:
        proc = target.start(pinning.wrap(target.cores))
        if proc is None:
            if target.missing not in notes:
                notes.append(target.missing)
            continue
        try:
            rows += run_target(target.name, proc, target.path, load, target.workers)
        finally:
            stack.end(proc)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="each measurement")
    parser.add_argument("--warmup", type=float, default=2.0, help="before each target's runs")
    parser.add_argument("--c1-seconds", type=float, default=5.0, help="the c1 measurement")
    parser.add_argument("--threads", type=int, default=2, help="wrk's threads")
    parser.add_argument("--connections", type=int, default=16, help="wrk's connections")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every target (median)")
    parser.add_argument("--entries", type=int, default=1, help="replica entries in the pool")
    parser.add_argument(
        "--workers", help="worker counts to measure, e.g. 1,2,4 (default: 1,2; 8 too from 16 CPUs)"
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="run every process on every CPU (default: each target on CPUs of its own)",
    )
    parser.add_argument(
        "--baseline",
        help="the commit whose gateway is the single process (default: this tree before "
        "--workers exists, main's last commit before --workers after)",
    )
    parser.add_argument(
        "--single-tree",
        type=Path,
        help="a checkout (no git needed) whose gateway is the single process, instead of "
        "--baseline's: where git is not at hand, say a lent machine",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if wrk_binary() is None:
        print("wrk not found: WITH_WRK=1 bash .ci/system-deps.sh installs it", file=sys.stderr)
        return 2
    notes = [
        f"pool: {args.entries} replica entr{'y' if args.entries == 1 else 'ies'}, "
        "the echo upstream; plain route"
    ]
    with Stack() as stack:
        body_file = stack.workdir / "body.json"
        body_file.write_bytes(body())
        load = Load(
            args.threads, args.connections, args.seconds, args.warmup, args.c1_seconds, body_file
        )
        upstream = echo(stack)
        plan = targets(stack, upstream, args, notes)
        pinning = Pinning(not args.no_pin, upstream.pid)
        notes.append(pinning.note())
        rounds = [
            one_round(stack, upstream, plan, load, notes, pinning) for _ in range(args.rounds)
        ]
    rows = medians(rounds)
    failed = sum(r.result.failures for runs in rounds for r in runs)
    if args.rounds > 1:
        notes.append(
            f"rounds: {args.rounds}; each row is its median round by req/s "
            f"({failed} failed over all rounds)"
        )
    table = render(rows, notes)
    print(table)
    save("scaling", table)
    if failed:
        print(f"FAILED: {failed} requests failed (must be 0)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

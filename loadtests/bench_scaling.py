"""Scaling benchmark: requests/s over an upstream that costs almost nothing, wrk as the load.

One run, one upstream (``loadtests/echo_upstream.py``: a bare uvloop + httptools V2 server with a
fixed answer that echoes the request's id), one request (a digits row as JSON, wrk's Lua POST in
``loadtests/wrk/infer.lua``), measured at c16 (2 wrk threads) and at c1 against, one at a time:
the upstream directly; nginx with one worker in front of it; the minimal Python proxy; the
gateway as one process ("single": ``gateway serve``, one pool with one replica entry, the plain
route); and, where ``gateway serve`` has ``--workers``, the gateway with 1 and 2 data-plane
workers (and 8 on a machine with 16 CPUs or more). Each proxy runs alone: it is started,
warmed up, measured and stopped before the next one starts.

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
from loadtests.stack import ROOT, Proc, Stack, cpu_seconds, free_port, pool_config
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
    start: Callable[[], Proc | None]  # None: not available here (a note says why)
    missing: str = ""


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
    stack: Stack, upstream: Proc, entries: int, name: str, tree: Path, args: list[str]
) -> Proc:
    """``tree``'s ``gateway serve`` (this checkout's or another commit's) with ``args``."""
    config = gateway_config(upstream, entries)
    env = baseline.python_env(tree)
    return stack.gateway(config, name=name, env=env, args=args, cwd=tree)


def measure(
    proc: Proc, url: str, threads: int, connections: int, seconds: float, body_file: Path
) -> tuple[WrkResult, float | None]:
    """wrk's result against ``url`` and ``proc``'s CPU per request meanwhile."""
    before = cpu_seconds(proc.pid)
    result = run_wrk(
        url, threads=threads, connections=connections, seconds=seconds, body_file=body_file
    )
    if not result.requests:
        return result, None
    return result, (cpu_seconds(proc.pid) - before) / result.requests * 1e6


def run_target(name: str, proc: Proc, path: str, load: Load) -> list[Row]:
    """``proc`` warmed up, then measured at the main level and at c1."""
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
        result, cpu = measure(proc, url, threads, connections, seconds, load.body_file)
        if result.failures:
            print(f"warning: {name} c{connections}: {result.failures} failed {result.errors}")
        rows.append(Row(name, connections, result, cpu))
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
            lambda: stack.nginx([upstream.url]),
            "nginx: not installed (WITH_NGINX=1 bash .ci/system-deps.sh)",
        ),
        Target("floor", DIRECT_PATH, lambda: floor(stack, upstream)),
    ]
    if tree is not None:
        out.append(
            Target(
                SINGLE,
                GATEWAY_PATH,
                lambda: start_gateway(stack, upstream, entries, "single", tree, []),
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
            )
        )
    return out


def _workers(stack: Stack, upstream: Proc, entries: int, n: int) -> Callable[[], Proc]:
    return lambda: start_gateway(
        stack, upstream, entries, f"workers-{n}", ROOT, ["--workers", str(n)]
    )


def one_round(
    stack: Stack, upstream: Proc, plan: list[Target], load: Load, notes: list[str]
) -> list[Row]:
    """Direct, then each target in turn: started, measured, stopped."""
    rows = run_target("direct", upstream, DIRECT_PATH, load)
    for target in plan:
        proc = target.start()
        if proc is None:
            if target.missing not in notes:
                notes.append(target.missing)
            continue
        try:
            rows += run_target(target.name, proc, target.path, load)
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
        rounds = [one_round(stack, upstream, plan, load, notes) for _ in range(args.rounds)]
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

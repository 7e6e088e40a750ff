"""The scaling benchmark's table: one row per target and load, and issue 39's checks below it.

Ratios are taken within one run (``loadtests/bench_scaling.py``); the checks' thresholds are the
issue's, as data (`RATIOS`, `LATENCIES`), so the table says at a glance which hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadtests.wrk_runner import WrkResult

SINGLE = "gateway single"  # the gateway as one process, before data-plane workers


@dataclass(frozen=True)
class Row:
    target: str
    connections: int
    result: WrkResult
    cpu_us: float | None  # the target's CPU per request, its child processes included
    # of which its own process's, where the work is in its children (a gateway's control
    # process beside its workers); None: one process, or not told apart
    control_us: float | None = None


# Issue 39's scaling checks, as data: (what, numerator, denominator, wanted); req/s at c16.
RATIOS = [
    ("2 workers ÷ 1 worker, req/s", "gateway 2 workers", "gateway 1 worker", "≥ 1.5"),
    ("1 worker ÷ single process, req/s", "gateway 1 worker", SINGLE, "≥ 1.25"),
    ("8 workers ÷ 1 worker, req/s (16 CPUs)", "gateway 8 workers", "gateway 1 worker", "≥ 6"),
]
# (what, target, wanted): the target's p50 at c1 minus direct's, in ms.
LATENCIES = [
    ("c1 p50 over direct, 1 worker", "gateway 1 worker", "≤ 0.25 ms"),
    ("c1 p50 over direct, single process", SINGLE, "-"),
]


def _find(rows: list[Row], target: str, connections: int) -> Row | None:
    return next((r for r in rows if r.target == target and r.connections == connections), None)


def _over(row: Row, to: Row | None) -> str:
    return f"{row.result.rate / to.result.rate:.2f}" if to and to.result.rate else "-"


def _p50_over(row: Row, direct: Row | None) -> str:
    return f"{row.result.p50_ms - direct.result.p50_ms:+.3f}" if direct else "-"


def render(rows: list[Row], notes: list[str]) -> str:
    """The run's table, issue 39's checks below it, then the notes (what ran, what did not)."""
    lines = [
        "| target | conn | req/s | p50 ms | p99 ms | failed | CPU µs/req | req/s vs direct "
        "| req/s vs nginx | p50 over direct ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        r, conn = row.result, row.connections
        cpu = f"{row.cpu_us:.0f}" if row.cpu_us is not None else "-"
        if row.control_us is not None:
            cpu += f" ({row.control_us:.0f} control)"
        lines.append(
            f"| {row.target} | {conn} | {r.rate:.0f} | {r.p50_ms:.3f} | {r.p99_ms:.3f} "
            f"| {r.failures} | {cpu} | {_over(row, _find(rows, 'direct', conn))} "
            f"| {_over(row, _find(rows, 'nginx', conn))} "
            f"| {_p50_over(row, _find(rows, 'direct', conn))} |"
        )
    main = max((r.connections for r in rows), default=1)
    lines += ["", f"| issue 39 (req/s at c{main}) | measured | wanted |", "|---|---:|---:|"]
    for what, top, bottom, wanted in RATIOS:
        over, under = _find(rows, top, main), _find(rows, bottom, main)
        lines.append(f"| {what} | {_over(over, under) if over else '-'} | {wanted} |")
    for what, target, wanted in LATENCIES:
        at_c1 = _find(rows, target, 1)
        measured = _p50_over(at_c1, _find(rows, "direct", 1)) if at_c1 else "-"
        lines.append(f"| {what}, ms | {measured} | {wanted} |")
    return "\n".join([*lines, "", *(f"- {note}" for note in notes)])


def medians(rounds: list[list[Row]]) -> list[Row]:
    """Per target and connection count, the row of its median round by req/s, in run order."""
    runs: dict[tuple[str, int], list[Row]] = {}
    for row in (r for rows in rounds for r in rows):
        runs.setdefault((row.target, row.connections), []).append(row)
    return [sorted(rows, key=lambda r: r.result.rate)[len(rows) // 2] for rows in runs.values()]

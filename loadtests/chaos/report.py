"""Reports: a Markdown page, a per-second CSV and a plot per scenario, and the suite table.

Each scenario folder also gets ``result.json``, a one-row summary; the suite table in
``<out>/README.md`` is rebuilt from every such file, so running one scenario again updates
its row and keeps the others.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path
from typing import Any

from loadtests.chaos import plots
from loadtests.chaos.objectives import pct
from loadtests.chaos.runner import NOT_RUN, Result
from loadtests.chaos.scenarios import SCENARIOS
from loadtests.chaos.stats import Run, Totals, tally
from loadtests.results_file import machine

RERUN = ".venv/bin/python -m loadtests.chaos --scenario {name}"
HEADER = """# Chaos suite results

Each scenario starts its own stack (replicas with `--enable-faults`, a gateway, Redis where
needed), runs Locust (`loadtests/locustfile.py`, FastHttpUser) against the gateway, injects
its faults on a timeline and checks the run against its objective. "failed" = any answer
that is not a valid 200 V2 answer (non-200, no answer, bad schema); "over deadline" = slower
than the 1000 ms deadline; "wrong" = a valid answer whose labels differ from what the same
model answers with no fault (reference labels from the same ONNX files, computed locally;
a fallback answer is compared with the fallback model); "degraded" = answers carrying
`x-degraded`. Run all: `.venv/bin/python -m loadtests.chaos` (a few minutes); one:
`--scenario NAME`. Plots and details: each scenario's folder.

"""
TABLE_HEAD = (
    "| scenario | fault | objective | result | sent | failed | over deadline | wrong "
    "| degraded during | p99 before / during ms | req/s during / before | report |\n"
    "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
)


def _ms(value: float) -> str:
    return "-" if value != value else f"{value:.1f}"  # NaN -> "-"


def _phase_row(name: str, t: Totals) -> str:
    return (
        f"| {name} | {t.seconds:.1f} | {t.sent} | {t.rate:.0f} | {_ms(t.p50_ms)} | "
        f"{_ms(t.p99_ms)} | {_ms(t.max_ms)} | {t.failed} | {t.late} | "
        f"{t.degraded} ({t.degraded_rate:.1%}) | {t.wrong} ({t.wrong_rate:.2%}) |"
    )


def summary(result: Result) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": result.scenario.name,
        "title": result.scenario.title,
        "status": result.status,
        "note": result.note,
        "smoke": result.smoke,
        "objective": result.objective.describe(),
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "failures": [c.name for c in result.verdict.failures] if result.verdict else [],
        "machine": machine(),
    }
    if result.run is not None:
        whole, phases = result.run.overall(), result.run.phases(result.windows)
        before, during = phases["before"], phases["during"]
        row.update(
            sent=whole.sent,
            failed=whole.failed,
            late=whole.late,
            wrong=whole.wrong,
            degraded_during=during.degraded_rate,
            p99_before=before.p99_ms,
            p99_during=during.p99_ms,
            rate_ratio=during.rate / before.rate if before.rate else 0,
        )
    return row


def write_scenario(result: Result, folder: Path) -> Path:
    """Write README.md, seconds.csv, timeline.png and result.json; returns the README path."""
    folder.mkdir(parents=True, exist_ok=True)
    s = result.scenario
    mode = "smoke run" if result.smoke else "full run"
    lines = [
        f"# {s.name}: {s.title}",
        "",
        f"**{result.status.upper()}** ({mode}, {time.strftime('%Y-%m-%d %H:%M')})"
        + (f": {result.note}" if result.note else ""),
        "",
        f"Expected: {s.expect}.",
        "",
        f"Objective: {result.objective.describe()}.",
        "",
    ]
    if result.run is not None and result.verdict is not None:
        seconds = result.run.per_second()
        _write_csv(folder / "seconds.csv", seconds)
        png = plots.timeline(
            folder / "timeline.png",
            f"{s.name}: {s.title}",
            seconds,
            result.windows,
            result.run.deadline_ms,
        )
        lines += ["![timeline](timeline.png)", ""] if png else ["(no plot: matplotlib missing)"]
        lines += ["| check | bound | measured | ok |", "|---|---|---|---|"]
        lines += [
            f"| {c.name} | {c.bound} | {c.actual} | {'yes' if c.passed else '**no**'} |"
            for c in result.verdict.checks
        ]
        lines += [
            "",
            "| phase | s | sent | req/s | p50 ms | p99 ms | max ms | failed "
            "| over deadline | degraded | wrong |",
            "|---|" + "---:|" * 10,
        ]
        for name, totals in result.run.phases(result.windows).items():
            lines.append(_phase_row(name, totals))
        lines.append(_phase_row("whole run", result.run.overall()))
        lines += _breakdowns(result.run)
        for when, seen in result.states:
            lines += ["", f"Gateway `/admin/state` at the {when}:", ""]
            lines += [f"- {line}" for line in seen]
        lines += ["", "Timeline (seconds since the first request):", ""]
        lines += [f"- {at:6.2f} s: {label}" for at, label in result.log]
        lines += [
            f"- fault window {w.label!r}: {w.start:.2f}-{w.end:.2f} s" for w in result.windows
        ]
        users = "+".join(s.users)
        lines += [
            "",
            f"Load: {users}, {result.users} users (Locust FastHttpUser)"
            f" at {s.rate:g} requests/s each, deadline {result.run.deadline_ms:g} ms. "
            f"Stack: {', '.join(f'{n} × {p}' for p, n in s.topology.pools)}"
            f"{', redis' if s.topology.redis else ''}, one gateway.",
            "Per-second numbers: [seconds.csv](seconds.csv).",
        ]
    if result.logs:
        lines += [
            "",
            "Process logs: " + ", ".join(f"[{n}](logs/{p.name})" for n, p in result.logs.items()),
        ]
    lines += ["", f"Rerun: `{RERUN.format(name=s.name)}`", ""]
    readme = folder / "README.md"
    readme.write_text("\n".join(lines))
    (folder / "result.json").write_text(json.dumps(summary(result), indent=1) + "\n")
    return readme


def _breakdowns(run: Run) -> list[str]:
    """Counts by response header: x-vote, x-degraded, and who served the wrong answers."""
    events = run.events
    parts = [
        ("answers by x-vote", tally(events, lambda e: e.vote, lambda e: e.ok)),
        ("degraded answers by x-degraded", tally(events, lambda e: e.reason, lambda e: e.ok)),
        (
            "wrong answers by x-served-by",
            tally(events, lambda e: e.served_by or "?", lambda e: e.ok and e.wrong),
        ),
        ("wrong answers by x-vote", tally(events, lambda e: e.vote, lambda e: e.ok and e.wrong)),
        (
            "failed requests by kind",
            tally(events, lambda e: f"{e.error} {e.status}", lambda e: not e.ok),
        ),
    ]
    lines = [
        f"- {name}: " + ", ".join(f"{k} × {n}" for k, n in counts.most_common(8))
        for name, counts in parts
        if counts
    ]
    return ["", *lines] if lines else []


def _write_csv(path: Path, seconds: list[Totals]) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(
            ["second", "sent", "failed", "late", "degraded", "wrong", "p50_ms", "p99_ms", "max_ms"]
        )
        for i, t in enumerate(seconds):
            writer.writerow(
                [
                    i,
                    t.sent,
                    t.failed,
                    t.late,
                    t.degraded,
                    t.wrong,
                    _ms(t.p50_ms),
                    _ms(t.p99_ms),
                    _ms(t.max_ms),
                ]
            )


def _suite_row(row: dict[str, Any]) -> str:
    status = row["status"]
    result = {"pass": "**PASS**", "fail": "**FAIL**"}.get(status, status)
    if row.get("failures"):
        result += " (" + ", ".join(row["failures"]) + ")"
    if status == NOT_RUN:  # the check-config message is in the scenario's README
        result += f": {row['note'].split(' (check-config')[0]}"
    elif status != "pass" and status != "fail" and row.get("note"):
        result += f": {row['note'][:120]}"
    if row.get("smoke"):
        result += " (smoke)"
    link = f"[{row['name']}/]({row['name']}/README.md)"
    if "sent" not in row:
        blanks = " - |" * 7
        head = f"| {row['name']} | {row['title']} | {row['objective']} | {result} |"
        return f"{head}{blanks} {link} |"
    return (
        f"| {row['name']} | {row['title']} | {row['objective']} | {result} | {row['sent']} "
        f"| {row['failed']} | {row['late']} | {row['wrong']} | {pct(row['degraded_during'])} "
        f"| {_ms(row['p99_before'])} / {_ms(row['p99_during'])} | {row['rate_ratio']:.0%} "
        f"| {link} |"
    )


def write_suite(out: Path) -> Path:
    """Rebuild ``out/README.md`` from every scenario's result.json, in catalogue order."""
    order = {s.name: i for i, s in enumerate(SCENARIOS)}
    rows = []
    for path in out.glob("*/result.json"):
        rows.append(json.loads(path.read_text()))
    rows.sort(key=lambda r: (order.get(r["name"], len(order)), r["name"]))
    text = HEADER + TABLE_HEAD + "\n".join(_suite_row(r) for r in rows) + "\n"
    capacity = out / "capacity" / "README.md"
    if capacity.is_file():
        text += "\nMaximum sustainable throughput, gateway vs direct: "
        text += "[capacity/README.md](capacity/README.md).\n"
    readme = out / "README.md"
    readme.write_text(text)
    return readme

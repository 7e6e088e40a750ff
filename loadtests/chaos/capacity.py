"""Locust's maximum sustainable throughput on this machine: through the gateway vs direct.

One replica of `digits-mlp` and one gateway in front of it; Locust (FastHttpUser, closed
loop, batch-1 bodies, every answer checked) runs the step shape twice, straight at the
replica and through the gateway. Each step's first second is left out (users starting). A
step is *sustainable* when it has no failed request and p99 < 100 ms; the maximum
sustainable throughput is the highest req/s of such a step. Locust, the gateway and the
replica share the machine's cores, as they would in a sidecar. Run:
``.venv/bin/python -m loadtests.chaos.capacity`` (about 2 × 8 × 6 s).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loadtests.chaos.events import read_events
from loadtests.chaos.shapes import step_windows
from loadtests.chaos.stats import Run, Totals
from loadtests.chaos.swarm import Load, Swarm
from loadtests.stack import ROOT, Stack, cpu_seconds, raise_on_sigterm

MODEL = "digits-mlp"
P99_LIMIT_MS = 100.0
SKIP_S = 1.0  # the start of each step


@dataclass(frozen=True, slots=True)
class Step:
    users: int
    totals: Totals
    rates: tuple[float, ...] = ()  # req/s of each whole second of the step (the spread)
    cpu_us: tuple[tuple[str, float], ...] = ()  # (process, CPU µs per request) in the step

    @property
    def sustainable(self) -> bool:
        return (
            self.totals.sent > 0 and self.totals.failed == 0 and (self.totals.p99_ms < P99_LIMIT_MS)
        )


def _cpu_at(at: float, pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each process, read at wall-clock time ``at`` (waits until then)."""
    time.sleep(max(0.0, at - time.time()))
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def measure(
    url: str, workdir: Path, name: str, users: list[int], step_s: float, pids: dict[str, int]
) -> list[Step]:
    """One step-shape run at ``url``; CPU of ``pids`` and of Locust is read around each step."""
    extra = (
        "--shape",
        "step",
        "--step-users",
        ",".join(map(str, users)),
        "--step-s",
        str(step_s),
        "--model",
        MODEL,
        "--tags",
        "single",
    )
    load = Load(("DigitsUser",), max(users), 0.0, step_s * len(users), 1000, "step", extra)
    windows = step_windows(max(users), users, step_s, None)
    swarm = Swarm.start(load, url, workdir, name)
    cpu: list[tuple[dict[str, float], dict[str, float]]] = []
    try:
        t0 = swarm.wait_first_event()
        watched = {**pids, "locust": swarm.process.pid}
        for _, start, end in windows:
            cpu.append((_cpu_at(t0 + start + SKIP_S, watched), _cpu_at(t0 + end, watched)))
        swarm.wait()
    finally:
        swarm.stop()
    run = Run.of(read_events(swarm.events), 1000, t0)
    seconds = run.per_second()
    steps = []
    for (u, start, end), (before, after) in zip(windows, cpu, strict=True):
        totals = run.between(start + SKIP_S, end)
        per_req = tuple((k, (after[k] - before[k]) * 1e6 / max(1, totals.sent)) for k in after)
        rates = tuple(s.rate for s in seconds[math.ceil(start + SKIP_S) : math.floor(end)])
        steps.append(Step(u, totals, rates, per_req))
    return steps


def best(steps: list[Step]) -> Step | None:
    return max((s for s in steps if s.sustainable), key=lambda s: s.totals.rate, default=None)


def render(results: dict[str, list[Step]]) -> str:
    head = " | ".join(f"{t} req/s | {t} p50 ms | {t} p99 ms | {t} failed" for t in results)
    lines = [
        "# Maximum sustainable throughput: gateway vs direct",
        "",
        __doc__.split("\n\n")[1],
        "",
        f"| users | {head} |",
        "|---:|" + "---:|" * 4 * len(results),
    ]
    for i, step in enumerate(next(iter(results.values()))):
        cells = []
        for steps in results.values():
            t = steps[i].totals
            mark = "" if steps[i].sustainable else " ✗"
            spread = (
                f" ({min(steps[i].rates):.0f}-{max(steps[i].rates):.0f})"
                if (steps[i].rates)
                else ""
            )
            cells.append(
                f"{t.rate:.0f}{spread}{mark} | {t.p50_ms:.1f} | {t.p99_ms:.1f} | {t.failed}"
            )
        lines.append(f"| {step.users} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "req/s: the step's mean (slowest-fastest whole second in brackets). "
        "✗: not sustainable (a failed request, or p99 ≥ 100 ms).",
        "",
    ]
    lines += [
        "CPU µs per request, by process (from /proc; 2 cores = 2,000,000 µs/s):",
        "",
        "| users | "
        + " | ".join(f"{t}: {k}" for t, steps in results.items() for k, _ in steps[0].cpu_us)
        + " |",
        "|---:|" + "---:|" * sum(len(steps[0].cpu_us) for steps in results.values()),
    ]
    for i, step in enumerate(next(iter(results.values()))):
        cells = [f"{us:.0f}" for steps in results.values() for _, us in steps[i].cpu_us]
        lines.append(f"| {step.users} | " + " | ".join(cells) + " |")
    lines.append("")
    for target, steps in results.items():
        top = best(steps)
        lines.append(
            f"- **{target}**: "
            + (
                f"{top.totals.rate:.0f} req/s at {top.users} users (p99 {top.totals.p99_ms:.1f} ms)"
                if top
                else "no sustainable step"
            )
        )
    return "\n".join(lines) + "\n"


def plot(path: Path, results: dict[str, list[Step]]) -> None:
    from loadtests.chaos import plots

    if not plots.available():
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for target, steps in results.items():
        users = [s.users for s in steps]
        top.plot(users, [s.totals.rate for s in steps], marker="o", label=target)
        bottom.plot(users, [s.totals.p99_ms for s in steps], marker="o", label=target)
    bottom.axhline(P99_LIMIT_MS, color="red", linestyle="--", linewidth=0.8)
    top.set_ylabel("req/s")
    bottom.set_ylabel("p99 ms")
    bottom.set_yscale("log")
    bottom.set_xscale("log", base=2)
    bottom.set_xlabel("Locust users (closed loop)")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.legend()
    top.set_title("Locust FastHttpUser, batch 1, one replica of digits-mlp", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--step-s", type=float, default=6.0)
    parser.add_argument("--out", type=Path, default=ROOT / "loadtests" / "results" / "capacity")
    args = parser.parse_args(argv)
    users = [int(u) for u in args.users.split(",")]
    raise_on_sigterm()
    with Stack() as stack:
        replica = stack.replica("replica", MODEL, faults=False)
        pool = {"model": MODEL, "replicas": [{"id": "r0", "url": replica.url}]}
        config = {"pools": {MODEL: pool}, "models": {MODEL: {"pool": MODEL}}}
        gateway = stack.gateway(config)
        results = {
            "direct": measure(
                replica.url, stack.workdir, "direct", users, args.step_s, {"replica": replica.pid}
            ),
            "gateway": measure(
                gateway.url,
                stack.workdir,
                "gateway",
                users,
                args.step_s,
                {"gateway": gateway.pid, "replica": replica.pid},
            ),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    text = render(results)
    (args.out / "README.md").write_text(text + "\n![capacity](capacity.png)\n")
    plot(args.out / "capacity.png", results)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

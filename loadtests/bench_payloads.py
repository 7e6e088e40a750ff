"""Payload sweep: 300 B, 60 KB, 600 KB and 6 MB, binary and JSON, direct vs nginx vs gateway.

One run, one stack (`loadtests.payloads`): each payload at concurrency 8 through direct (one
replica), nginx (keep-alive upstream over both replicas) and the gateway's plain route, plus the
gateway's vote route at 600 KB; then one digits row at c16 and c64. Prints req/s, p50/p99 and
the proxy's CPU µs per request (process and its children, from /proc) with ratios to nginx, the
issue's targets as PASS/MISS, and draws CPU per request against body size (log-log) as a PNG.
Run: ``make bench`` or ``.venv/bin/python loadtests/bench_payloads.py [--seconds 3]``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.loadgen import LoadResult, closed_loop
from loadtests.payloads import IMAGE, Payload, payload, payload_of, start, sweep_payloads
from loadtests.results_file import save
from loadtests.stack import ROOT, Proc, Stack, cpu_seconds

PNG = ROOT / "docs" / "payload-sweep.png"


@dataclass
class Row:
    target: str
    payload: Payload
    concurrency: int
    result: LoadResult
    cpu_us: float | None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.payload.label, self.payload.encoding, self.concurrency)


def measure(
    proc: Proc | None, url: str, p: Payload, model: str, concurrency: int, seconds: float
) -> tuple[LoadResult, float | None]:
    path = f"/v2/models/{model}/infer"
    warm = closed_loop(
        url,
        path,
        p.body,
        concurrency=concurrency,
        seconds=0.3,
        max_requests=200,
        headers=p.headers,
        timeout_s=30.0,
    )
    uvloop.run(warm)
    before = cpu_seconds(proc.pid) if proc else None
    result = uvloop.run(
        closed_loop(
            url,
            path,
            p.body,
            concurrency=concurrency,
            seconds=seconds,
            max_requests=100_000,
            headers=p.headers,
            timeout_s=30.0,
        )
    )
    cpu = None
    if proc is not None and before is not None and result.requests:
        cpu = (cpu_seconds(proc.pid) - before) / result.requests * 1e6
    bad = sum(n for s, n in result.statuses.items() if s != 200)
    if bad or result.errors:
        print(f"warning: {url}{path} {p.label}/{p.encoding}: {bad} non-200, {dict(result.errors)}")
    return result, cpu


def run(seconds: float) -> list[Row]:
    rows: list[Row] = []
    with Stack() as stack:
        s = start(stack)
        plan = [(p, 8) for p in sweep_payloads()]
        small = payload_of("300B", "json")
        plan += [(small, 16), (small, 64)]
        for p, conc in plan:
            direct = s.replicas[p.model][0]
            targets: list[tuple[str, Proc | None, str, str]] = [
                ("direct", None, direct.url, p.model),
                ("gateway", s.gateway, s.gateway.url, p.model),
            ]
            if s.nginx is not None:
                targets.insert(1, ("nginx", s.nginx, s.nginx.url, p.model))
            if p.model == IMAGE and p.label == "600KB":
                targets.append(("gateway vote", s.gateway, s.gateway.url, "image-vote"))
            for name, proc, url, model in targets:
                result, cpu = measure(proc, url, p, model, conc, seconds)
                rows.append(Row(name, p, conc, result, cpu))
                print(
                    f"  {name:<13} {p.label:>5} {p.encoding:<6} c{conc:<3} "
                    f"{result.rate:8.0f} req/s  cpu {cpu or 0:8.0f} µs",
                    flush=True,
                )
    return rows


def _find(rows: list[Row], target: str, key: tuple[str, str, int]) -> Row | None:
    return next((r for r in rows if r.target == target and r.key == key), None)


def render(rows: list[Row]) -> str:
    lines = [
        "| payload | enc | conc | target | body bytes | req/s | p50 ms | p99 ms "
        "| proxy CPU µs/req | 200s/s vs nginx | CPU vs nginx | p50 vs nginx | not 200 |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ng = _find(rows, "nginx", r.key)
        cpu = f"{r.cpu_us:.0f}" if r.cpu_us is not None else "-"
        rate = cpu_x = p50 = "-"
        if ng is not None and r.target.startswith("gateway"):
            rate = f"{_ok(r.result) / _ok(ng.result):.2f}" if _ok(ng.result) else "-"
            cpu_x = f"{r.cpu_us / ng.cpu_us:.1f}×" if r.cpu_us and ng.cpu_us else "-"
            p50 = f"{r.result.quantile_ms(0.5) / ng.result.quantile_ms(0.5):.2f}×"
        lines.append(
            f"| {r.payload.label} | {r.payload.encoding} | {r.concurrency} | {r.target} "
            f"| {len(r.payload.body):,} | {r.result.rate:.0f} | {r.result.quantile_ms(0.5):.2f} "
            f"| {r.result.quantile_ms(0.99):.2f} | {cpu} | {rate} | {cpu_x} | {p50} "
            f"| {_failures(r.result)} |"
        )
    return "\n".join(lines)


def _ok(result: LoadResult) -> float:
    """200s per second: what a throughput comparison counts (a fast 503 is not throughput)."""
    return result.statuses[200] / result.seconds if result.seconds else 0.0


def _failures(result: LoadResult) -> str:
    """Answers other than 200, by status (0: a transport error); '-' when none."""
    codes = {s: n for s, n in sorted(result.statuses.items()) if s != 200}
    codes.update({0: sum(result.errors.values())} if result.errors else {})
    return ", ".join(f"{n}×{s}" for s, n in codes.items()) or "-"


def targets(rows: list[Row]) -> list[str]:
    """The issue's targets, each with the measured figures and PASS or MISS."""
    out = []

    def check(
        what: str, key: tuple[str, str, int], rate: float | None, cpu: float, p50: float | None
    ) -> None:
        gw, ng = _find(rows, "gateway", key), _find(rows, "nginx", key)
        if gw is None or ng is None or not gw.cpu_us or not ng.cpu_us or not _ok(ng.result):
            out.append(f"{what}: not measured")
            return
        r = _ok(gw.result) / _ok(ng.result)
        c = gw.cpu_us / ng.cpu_us
        q = gw.result.quantile_ms(0.5) / ng.result.quantile_ms(0.5)
        ok = (rate is None or r >= rate) and c <= cpu and (p50 is None or q <= p50)
        out.append(
            f"{'PASS' if ok else 'MISS'} {what}: throughput {r:.0%} of nginx, "
            f"CPU {c:.1f}× nginx, p50 {q:.2f}× nginx"
        )

    for label in ("600KB", "6MB"):
        check(f"{label} binary c8 (≥90 %, ≤2×, p50 ≤1.2×)", (label, "binary", 8), 0.9, 2.0, 1.2)
    check("~1.2 MB JSON c8 (≥90 %, ≤2×)", ("600KB", "json", 8), 0.9, 2.0, None)
    for conc in (16, 64):
        check(f"300 B c{conc} (CPU ≤3×)", ("300B", "json", conc), None, 3.0, None)
    return out


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for target in ("nginx", "gateway", "gateway vote"):
        for enc, style in (("binary", "-o"), ("json", "--s")):
            pts = sorted(
                (len(r.payload.body), r.cpu_us)
                for r in rows
                if r.target == target
                and r.payload.encoding == enc
                and r.concurrency == 8
                and r.cpu_us
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), style, label=f"{target} ({enc})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("request body bytes")
    ax.set_ylabel("proxy CPU µs per request")
    ax.set_title("CPU per request against payload size (c8, one run)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--png", type=Path, default=PNG)
    args = parser.parse_args(argv)
    rows = run(args.seconds)
    print(render(rows))
    save("payloads", render(rows))
    print("\n".join(targets(rows)))
    plot(rows, args.png)
    print(f"plot: {args.png}")
    return 0


__all__ = ["main", "payload"]

if __name__ == "__main__":
    sys.exit(main())

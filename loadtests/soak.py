"""Soak: steady load on the gateway for a while, its RSS sampled, fails if memory grows per request.

Why: a gateway that leaks a few dozen bytes a request is healthy for an hour and killed by its
memory limit within days. One run starts the replicas of ``config/local.yaml`` on free loopback
ports and one gateway per door asked for: ``rest`` (model ``digits`` over REST), ``grpc`` (the
same model through the gRPC door) and ``vote`` (``digits-vote``, three versions voted). Each
gets a closed-loop load at a fixed concurrency; the gateway's VmRSS is read every few seconds.
After a warm-up (pools filling, allocator arenas growing), the time after it is cut in three
equal spans, and RSS grown per request served in each; the median of the three is the steady
bytes per request (a leak grows in every span, a one-off step in one: a gateway's RSS steps by
about 0.9 MB once near its first minute, idle or loaded, which a least-squares line over a short
run would read as tens of bytes a request). The run fails when that is over
``--max-bytes-per-request``, when RSS grew by more than ``--max-growth-mb`` after the warm-up, or
when requests failed; the least-squares slope is reported beside it. It
writes a JSON result per door under ``loadtests/results/soak/`` and draws the latest result of
each door into ``docs/img/soak-rss.png``. Every process is stopped by PID when it ends.

Run: ``make soak`` (``SOAK_DOORS=rest,grpc SOAK_MINUTES=60``), or
``.venv/bin/python -m loadtests.soak --doors rest --minutes 15``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import uvloop
import yaml

from loadtests.soak_load import Counts, Sample, grpc_load, rest_load, sample_rss
from loadtests.stack import ROOT, Proc, Stack, free_port, raise_on_sigterm
from replicas.dataset import load_split
from v2proto.grpc import grpc_service_pb2 as pb

RESULTS = ROOT / "loadtests" / "results" / "soak"
PNG = ROOT / "docs" / "img" / "soak-rss.png"
LOCAL_CONFIG = ROOT / "config" / "local.yaml"
DOORS = {"rest": "digits", "grpc": "digits", "vote": "digits-vote"}  # door -> model
MAX_WARMUP_S = 600.0  # the dashboard's ring of one row a second fills in ten minutes


def default_warmup_s(seconds: float) -> float:
    """Ten minutes, or two thirds of a shorter run: the dashboard's history ring (bounded, but
    filling for its first ten minutes) is warm-up, not a leak, and the issue's bound is on RSS
    after the first ten minutes."""
    return min(MAX_WARMUP_S, seconds * 2 / 3)


@dataclass
class Door:
    """One gateway under one steady load, and what was seen of it."""

    name: str
    model: str
    gateway: Proc
    grpc_target: str | None = None
    counts: Counts = field(default_factory=Counts)
    samples: list[Sample] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    door: str
    model: str
    concurrency: int
    seconds: float
    warmup_s: float
    requests: int
    failed: int
    errors: dict[str, int]
    rss_start_mb: float  # the first sample
    rss_after_warmup_mb: float
    rss_end_mb: float
    growth_after_warmup_mb: float
    bytes_per_request: float  # the fitted slope after the warm-up
    steady_bytes_per_request: float  # the median of three spans after it: what is judged
    passed: bool
    why: list[str]
    samples: list[tuple[float, int, int]]  # (t_s, requests, rss_bytes)


def _row() -> list[float]:
    _, x_test, _, _ = load_split()
    return [float(v) for v in x_test[0]]


def rest_body(row: list[float]) -> bytes:
    """One digits row as V2 JSON, the request of the issue's steady load."""
    tensor = {"name": "input", "shape": [1, len(row)], "datatype": "FP32", "data": row}
    return orjson.dumps({"inputs": [tensor]})


def grpc_request(model: str, row: list[float]) -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    tensor = request.inputs.add(name="input", datatype="FP32", shape=[1, len(row)])
    tensor.contents.fp32_contents.extend(row)
    return request.SerializeToString()


def start_replicas(stack: Stack) -> dict[str, str]:
    """The replicas of ``config/local.yaml`` on free ports: replica id -> the URL to reach it."""
    config = yaml.safe_load(LOCAL_CONFIG.read_text())
    urls: dict[str, str] = {}
    for pool in config["pools"].values():
        model = pool["model"]
        for replica in pool["replicas"]:
            if replica["url"].startswith("grpc://"):
                urls[replica["id"]] = _grpc_replica(stack, replica["id"], model)
            else:
                urls[replica["id"]] = stack.replica(replica["id"], model, faults=False).url
    return urls


def _grpc_replica(stack: Stack, name: str, model: str) -> str:
    port, grpc_port = free_port(), free_port()
    argv = [
        sys.executable,
        "-m",
        "replicas.cli",
        "serve",
        "--name",
        model,
        "--model",
        str(ROOT / "models" / f"{model}.onnx"),
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
    ]
    stack.start(name, argv, f"http://127.0.0.1:{port}", "/v2/health/ready")
    return f"grpc://127.0.0.1:{grpc_port}"


def gateway_config(urls: dict[str, str], grpc_port: int | None) -> dict[str, Any]:
    """``config/local.yaml`` with the replicas at ``urls`` and its relative paths resolved."""
    config: dict[str, Any] = yaml.safe_load(LOCAL_CONFIG.read_text())
    for pool in config["pools"].values():
        pool.pop("local", None)  # `gateway up` starts those; here the stack did
        if "golden" in pool:
            pool["golden"]["file"] = str((LOCAL_CONFIG.parent / pool["golden"]["file"]).resolve())
        for replica in pool["replicas"]:
            replica["url"] = urls[replica["id"]]
    config["server"] = {"host": "127.0.0.1", "drain_s": 0}
    if grpc_port is not None:
        config["server"]["grpc_port"] = grpc_port
    return config


def start_doors(stack: Stack, names: list[str], urls: dict[str, str]) -> list[Door]:
    doors = []
    for name in names:
        grpc_port = free_port() if name == "grpc" else None
        gateway = stack.gateway(gateway_config(urls, grpc_port), name=f"gateway-{name}")
        target = None if grpc_port is None else f"127.0.0.1:{grpc_port}"
        doors.append(Door(name, DOORS[name], gateway, target))
    return doors


async def drive(doors: list[Door], *, seconds: float, concurrency: int, every_s: float) -> None:
    """Every door's load and RSS sampler at once, for ``seconds``."""
    row = _row()
    began = time.monotonic()
    stop_at = began + seconds
    jobs: list[Coroutine[Any, Any, None]] = []
    for door in doors:
        if door.grpc_target is not None:
            request = grpc_request(door.model, row)
            jobs.append(
                grpc_load(
                    door.grpc_target, request, door.counts, concurrency=concurrency, stop_at=stop_at
                )
            )
        else:
            path = f"/v2/models/{door.model}/infer"
            jobs.append(
                rest_load(
                    door.gateway.url,
                    path,
                    rest_body(row),
                    door.counts,
                    concurrency=concurrency,
                    stop_at=stop_at,
                )
            )
        jobs.append(
            sample_rss(
                door.gateway.pid,
                door.counts,
                door.samples,
                every_s=every_s,
                began=began,
                stop_at=stop_at,
            )
        )
    await asyncio.gather(*jobs)


def bytes_per_request(samples: list[Sample], warmup_s: float) -> float:
    """The least-squares slope of RSS against requests served, over the samples after
    ``warmup_s``; NaN when fewer than three such samples or no requests between them."""
    kept = [s for s in samples if s.t_s >= warmup_s]
    if len(kept) < 3 or kept[-1].requests == kept[0].requests:
        return float("nan")
    slope, _ = np.polyfit([s.requests for s in kept], [s.rss_bytes for s in kept], 1)
    return float(slope)


def steady_bytes_per_request(samples: list[Sample], warmup_s: float, spans: int = 3) -> float:
    """The median over ``spans`` equal stretches of time after ``warmup_s`` of RSS grown per
    request served in each; NaN when a stretch has fewer than two samples or no requests.

    A leak grows RSS in every stretch; a one-off step (an allocator arena growing, a ring's
    first chunk) in one, which the median leaves out where a fitted line would spread it over
    the whole run."""
    kept = [s for s in samples if s.t_s >= warmup_s]
    if len(kept) < 2:
        return float("nan")
    first, last = kept[0].t_s, kept[-1].t_s
    edges = [first + (last - first) * i / spans for i in range(spans + 1)]
    rates = []
    for start, end in itertools.pairwise(edges):
        span = [s for s in kept if start <= s.t_s <= end]
        if len(span) < 2 or span[-1].requests == span[0].requests:
            return float("nan")
        grown = span[-1].rss_bytes - span[0].rss_bytes
        rates.append(grown / (span[-1].requests - span[0].requests))
    return float(np.median(rates))


def judge(
    door: Door, *, seconds: float, warmup_s: float, concurrency: int, limits: argparse.Namespace
) -> Verdict:
    return _verdict(
        door.name,
        door.model,
        door.counts,
        door.samples,
        seconds=seconds,
        warmup_s=warmup_s,
        concurrency=concurrency,
        limits=limits,
    )


def _verdict(
    name: str,
    model: str,
    counts: Counts,
    samples: list[Sample],
    *,
    seconds: float,
    warmup_s: float,
    concurrency: int,
    limits: argparse.Namespace,
) -> Verdict:
    after = next((s for s in samples if s.t_s >= warmup_s), samples[-1])
    slope = bytes_per_request(samples, warmup_s)
    steady = steady_bytes_per_request(samples, warmup_s)
    growth = (samples[-1].rss_bytes - after.rss_bytes) / 1e6
    why = []
    if not steady <= limits.max_bytes_per_request:  # NaN fails too: nothing to judge by
        why.append(f"{steady:.1f} bytes/request > {limits.max_bytes_per_request}")
    if limits.max_growth_mb is not None and growth > limits.max_growth_mb:
        why.append(f"RSS grew {growth:.1f} MB after the warm-up > {limits.max_growth_mb}")
    if counts.failed > limits.max_failed:
        why.append(f"{counts.failed} failed > {limits.max_failed}")
    return Verdict(
        name,
        model,
        concurrency,
        seconds,
        warmup_s,
        counts.served,
        counts.failed,
        dict(counts.errors),
        samples[0].rss_bytes / 1e6,
        after.rss_bytes / 1e6,
        samples[-1].rss_bytes / 1e6,
        growth,
        slope,
        steady,
        not why,
        why,
        [(round(s.t_s, 2), s.requests, s.rss_bytes) for s in samples],
    )


def soak(
    names: list[str],
    *,
    seconds: float,
    warmup_s: float,
    concurrency: int,
    every_s: float,
    limits: argparse.Namespace,
) -> list[Verdict]:
    """Starts the stack, drives every door at once for ``seconds``, stops it all, judges."""
    with Stack() as stack:
        doors = start_doors(stack, names, start_replicas(stack))
        uvloop.run(drive(doors, seconds=seconds, concurrency=concurrency, every_s=every_s))
        return [
            judge(door, seconds=seconds, warmup_s=warmup_s, concurrency=concurrency, limits=limits)
            for door in doors
        ]


def rejudge(path: Path, warmup_s: float | None, limits: argparse.Namespace) -> Verdict:
    """The verdict on a stored run's own samples under another warm-up or other limits
    (``--rejudge``): judging again needs no second run."""
    record = json.loads(path.read_text())
    counts = Counts(record["requests"] - record["failed"], record["failed"], record["errors"])
    samples = [Sample(t, requests, rss) for t, requests, rss in record["samples"]]
    warmup = default_warmup_s(record["seconds"]) if warmup_s is None else warmup_s
    return _verdict(
        record["door"],
        record["model"],
        counts,
        samples,
        seconds=record["seconds"],
        warmup_s=warmup,
        concurrency=record["concurrency"],
        limits=limits,
    )


def write(verdict: Verdict, directory: Path = RESULTS, path: Path | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = path or directory / f"{verdict.door}-{stamp}.json"
    path.write_text(json.dumps(asdict(verdict), indent=1) + "\n")
    return path


def plot(directory: Path = RESULTS, png: Path = PNG) -> Path | None:
    """RSS against time for the latest result of each door in ``directory``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latest = {}
    for path in sorted(directory.glob("*.json")):  # names sort by door, then time
        result = json.loads(path.read_text())
        latest[result["door"]] = result
    if not latest:
        return None
    figure, axes = plt.subplots(figsize=(9, 4.5))
    for door, result in sorted(latest.items()):
        t = [s[0] / 60 for s in result["samples"]]
        rss = [s[2] / 1e6 for s in result["samples"]]
        label = (
            f"{door} ({result['model']}, c{result['concurrency']}): {result['requests']:,} "
            f"requests, {result['bytes_per_request']:.2f} B/request"
        )
        line = axes.plot(t, rss, label=label)[0]
        axes.axvline(result["warmup_s"] / 60, color=line.get_color(), linestyle=":", linewidth=1)
    axes.set_xlabel("minutes (dotted: end of warm-up)")
    axes.set_ylabel("gateway RSS (MB)")
    axes.set_title("Gateway resident memory under steady load (make soak)")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    plt.close(figure)
    return png


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doors", default="rest", help="comma-separated: rest, grpc, vote")
    parser.add_argument("--minutes", type=float, default=15.0, help="load time (default 15)")
    parser.add_argument(
        "--warmup-s",
        type=float,
        default=None,
        help="samples before this are not judged (default: 600 s, or two thirds of a shorter run)",
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling interval")
    parser.add_argument("--max-bytes-per-request", type=float, default=4.0)
    parser.add_argument("--max-growth-mb", type=float, default=5.0)
    parser.add_argument("--max-failed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--png", type=Path, default=PNG)
    parser.add_argument(
        "--rejudge",
        type=Path,
        nargs="+",
        metavar="RESULT",
        help="judge these stored results' samples again (with --warmup-s and the "
        "limits given) and rewrite them; runs nothing",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.rejudge:
        return _report([(rejudge(p, args.warmup_s, args), p) for p in args.rejudge], args)
    names = [n.strip() for n in args.doors.split(",") if n.strip()]
    unknown = [n for n in names if n not in DOORS]
    if unknown or not names:
        print(f"unknown door(s) {unknown}; choose from {sorted(DOORS)}", file=sys.stderr)
        return 2
    seconds = args.minutes * 60
    warmup_s = args.warmup_s if args.warmup_s is not None else default_warmup_s(seconds)
    raise_on_sigterm()
    verdicts = soak(
        names,
        seconds=seconds,
        warmup_s=warmup_s,
        concurrency=args.concurrency,
        every_s=args.sample_s,
        limits=args,
    )
    return _report([(v, None) for v in verdicts], args)


def _report(verdicts: list[tuple[Verdict, Path | None]], args: argparse.Namespace) -> int:
    for verdict, stored in verdicts:
        path = write(verdict, args.out, stored)
        print(
            f"{verdict.door}: {verdict.requests:,} requests, {verdict.failed} failed, RSS "
            f"{verdict.rss_start_mb:.1f} -> {verdict.rss_after_warmup_mb:.1f} (after "
            f"{verdict.warmup_s:.0f} s) -> {verdict.rss_end_mb:.1f} MB, "
            f"{verdict.steady_bytes_per_request:.2f} bytes/request "
            f"(fitted {verdict.bytes_per_request:.2f}): "
            f"{'PASS' if verdict.passed else 'FAIL ' + '; '.join(verdict.why)} "
            f"({path})"
        )
    png = plot(args.out, args.png)
    if png is not None:
        print(f"RSS curves: {png}")
    return 0 if all(v.passed for v, _ in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())

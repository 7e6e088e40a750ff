"""Runs wrk (a load generator in C) with a Lua POST of one V2 infer request; reads its summary.

wrk costs little per request, so on a 2-core machine the processes being measured keep most of
the CPU; its Lua script (``loadtests/wrk/infer.lua``) posts one digits row as JSON and prints a
one-line JSON summary, parsed here. Every run is bounded in time (wrk's own duration, and a
kill past it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "wrk" / "infer.lua"
SUMMARY = "wrk-summary "
ERRORS = ("connect", "read", "write", "status", "timeout")
GRACE_S = 30.0  # past wrk's own duration, before the run is killed


@dataclass(frozen=True)
class WrkResult:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int] = field(default_factory=dict)  # ERRORS -> count

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def failures(self) -> int:
        """Answers with a status of 400 or more, and socket errors and timeouts."""
        return sum(self.errors.values())


def wrk_binary() -> str | None:
    return shutil.which("wrk")


def parse(output: str) -> WrkResult:
    """The result in wrk's output (the Lua script's summary line)."""
    line = next((x for x in output.splitlines() if x.startswith(SUMMARY)), None)
    if line is None:
        raise RuntimeError(f"no summary in wrk's output: {output[-2000:]}")
    doc = json.loads(line[len(SUMMARY) :])
    return WrkResult(
        requests=int(doc["requests"]),
        seconds=doc["duration_us"] / 1e6,
        p50_ms=doc["p50_us"] / 1000,
        p99_ms=doc["p99_us"] / 1000,
        errors={name: int(doc[name]) for name in ERRORS},
    )


def run_wrk(
    url: str,
    *,
    threads: int,
    connections: int,
    seconds: float,
    body_file: Path | None = None,
) -> WrkResult:
    """``url``: the infer URL to POST to; ``body_file``: the request (default: the script's)."""
    binary = wrk_binary()
    if binary is None:
        raise RuntimeError("wrk not found: WITH_WRK=1 bash .ci/system-deps.sh installs it")
    duration = f"{max(1, round(seconds))}s"
    argv = [binary, f"-t{threads}", f"-c{connections}", f"-d{duration}", "--timeout", "5s"]
    argv += ["-s", str(SCRIPT), url]
    if body_file is not None:
        argv += ["--", str(body_file)]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=seconds + GRACE_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited {done.returncode}: {done.stderr[-2000:]}")
    return parse(done.stdout)

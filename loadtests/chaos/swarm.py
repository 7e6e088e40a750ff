"""Locust as a bounded subprocess: headless, fixed run time, events to a file, stopped by PID.

Locust runs in its own process (it monkey-patches with gevent) with ``-t`` as its own bound;
the runner still holds a hard deadline and stops it by PID (SIGTERM, then SIGKILL) if it
overstays, or when the run is interrupted.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from loadtests.chaos.events import ENV_VAR, first_event_time
from loadtests.stack import ROOT, stop

LOCUSTFILE = ROOT / "loadtests" / "locustfile.py"
START_TIMEOUT_S = 60.0  # imports, reference labels, first request
GRACE_S = 30.0  # past -t before it is stopped by force
SPAWN_PER_USER = 10  # -r: every user starts within 0.1 s


@dataclass(frozen=True, slots=True)
class Load:
    """What Locust runs: user classes, users, pace, shape, deadline."""

    users: tuple[str, ...]
    user_count: int
    rate: float  # requests/s per user; 0 = closed loop
    run_s: float
    deadline_ms: int = 1000
    shape: str = "steady"
    extra: tuple[str, ...] = ()  # more locust arguments, e.g. ("--model", "digits-mlp")

    def argv(self, host: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "-u",
            str(self.user_count),
            "-r",
            str(self.user_count * SPAWN_PER_USER),
            "-t",
            f"{math.ceil(self.run_s)}s",
            "--host",
            host,
            "--only-summary",
            "--stop-timeout",
            "2",
            "--shape",
            self.shape,
            "--rate",
            str(self.rate),
            "--deadline-ms",
            str(self.deadline_ms),
            *self.extra,
            *self.users,
        ]


@dataclass
class Swarm:
    process: subprocess.Popen[bytes]
    events: Path
    log: Path
    deadline: float  # monotonic time after which it is stopped by force

    @classmethod
    def start(cls, load: Load, host: str, workdir: Path, name: str = "locust") -> Swarm:
        events, log = workdir / f"{name}-events.jsonl", workdir / f"{name}.log"
        events.unlink(missing_ok=True)
        env = {**os.environ, ENV_VAR: str(events), "PYTHONUNBUFFERED": "1"}
        with log.open("wb") as out:
            process = subprocess.Popen(
                load.argv(host),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + START_TIMEOUT_S + load.run_s + GRACE_S
        return cls(process, events, log, deadline)

    def wait_first_event(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """The start time (epoch s) of the first request: the run's time zero."""
        limit = time.monotonic() + timeout_s
        while time.monotonic() < limit:
            t0 = first_event_time(self.events)
            if t0 is not None:
                return t0
            if self.process.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"locust sent no request; log:\n{self.tail()}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self) -> int:
        """Wait for Locust to finish by itself (bounded); its exit code."""
        while self.alive() and time.monotonic() < self.deadline:
            time.sleep(0.05)
        self.stop()
        return int(self.process.returncode)

    def stop(self) -> None:
        stop(self.process, grace_s=5.0)

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

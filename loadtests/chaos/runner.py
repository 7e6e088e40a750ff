"""Runs one scenario end to end: cluster up, Locust on, faults on the timeline, verdict.

Time zero is the first request Locust sends (read from its event file), so a slow Locust
start-up does not eat into the steady phase; every action is timed as it really ran, and the
fault windows in the report are those real times. Whatever happens, Locust and every process
of the cluster are stopped by PID before this returns.
"""

from __future__ import annotations

import contextlib
import copy
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadtests.chaos import gwstate
from loadtests.chaos import hardware as hw
from loadtests.chaos.cluster import Cluster
from loadtests.chaos.events import read_events
from loadtests.chaos.objectives import Objective, ObjectiveVerdict, evaluate
from loadtests.chaos.scenarios import DEADLINE_MS, Fault, Scenario, Timing
from loadtests.chaos.stats import Run, Window
from loadtests.chaos.swarm import Load, Swarm

PASS, FAIL, NOT_RUN, ERROR = "pass", "fail", "not run", "error"


@dataclass
class Result:
    scenario: Scenario
    timing: Timing
    objective: Objective
    smoke: bool
    status: str = ERROR
    note: str = ""
    users: int = 0  # Locust users actually run
    run: Run | None = None
    windows: list[Window] = field(default_factory=list)
    log: list[tuple[float, str]] = field(default_factory=list)  # (s since time zero, action)
    states: list[tuple[str, list[str]]] = field(default_factory=list)  # gateway's own view
    verdict: ObjectiveVerdict | None = None
    logs: dict[str, Path] = field(default_factory=dict)  # kept process logs (failed runs)


def _steps(faults: list[Fault]) -> list[tuple[float, int, bool]]:
    """(time, fault index, is the end) for every begin and end, in time order."""
    steps = [(f.at, i, False) for i, f in enumerate(faults)]
    steps += [(f.until, i, True) for i, f in enumerate(faults) if f.until is not None]
    return sorted(steps)


def _play(cluster: Cluster, swarm: Swarm, faults: list[Fault], t0: float, result: Result) -> None:
    started: dict[int, float] = {}
    for at, index, is_end in _steps(faults):
        while time.time() < t0 + at and swarm.alive():
            time.sleep(min(0.02, max(0.0, t0 + at - time.time())))
        if not swarm.alive():
            raise RuntimeError(f"locust stopped before the timeline ended:\n{swarm.tail()}")
        fault = faults[index]
        if is_end and cluster.gateway is not None:
            seen = gwstate.snapshot(cluster.gateway.url)
            result.states.append((f"end of {fault.label!r} ({time.time() - t0:.1f} s)", seen))
        began = time.time() - t0
        for action in fault.end if is_end else fault.begin:
            result.log.append((time.time() - t0, action.label))
            action(cluster)
        done = time.time() - t0
        if not is_end:
            started[index] = began
        if is_end or fault.until is None:
            result.windows.append(Window(started[index], done, fault.label))


def run_scenario(
    scenario: Scenario, timing: Timing, logs_dir: Path, smoke: bool, workers: int = 2
) -> Result:
    """Run one scenario against a gateway with ``workers`` data-plane workers; the process logs
    of a failed run are copied into ``logs_dir``."""
    objective = scenario.objective.relaxed() if smoke else scenario.objective
    result = Result(scenario, timing, objective, smoke)
    cluster = Cluster(scenario.topology, copy.deepcopy(scenario.models), workers)
    swarm: Swarm | None = None
    try:
        problem = cluster.check_config()
        if problem is not None:
            result.status, result.note = NOT_RUN, f"needs {scenario.needs or 'a newer gateway'}"
            result.note += f" (check-config: {problem})"
            return result
        gateway = cluster.start()
        retries_before = hw.retries(gateway.url) if scenario.checks else 0.0
        failed_before = hw.failed_attempts(gateway.url) if scenario.checks else {}
        result.users = max(2, scenario.user_count // 2) if smoke else scenario.user_count
        load = Load(scenario.users, result.users, scenario.rate, timing.total, DEADLINE_MS)
        swarm = Swarm.start(load, gateway.url, cluster.stack.workdir)
        t0 = swarm.wait_first_event()
        _play(cluster, swarm, scenario.timeline(timing), t0, result)
        swarm.wait()
        result.states.append(("end of the run", gwstate.snapshot(gateway.url)))
        result.run = Run.of(read_events(swarm.events), DEADLINE_MS, t0)
        result.verdict = evaluate(objective, result.run, result.windows)
        if scenario.checks is not None:
            failed = hw.delta(hw.failed_attempts(gateway.url), failed_before)
            seen = hw.Seen(t0, result.log, hw.drains(gateway.url, t0),
                           hw.retries(gateway.url) - retries_before, failed)  # fmt: skip
            checks = result.verdict.checks + tuple(scenario.checks(seen))
            result.verdict = ObjectiveVerdict(checks)
        result.status = PASS if result.verdict.passed else FAIL
    except Exception as exc:
        result.status, result.note = ERROR, f"{type(exc).__name__}: {exc}"
    finally:
        if swarm is not None:
            swarm.stop()
            _keep_locust_summary(swarm, logs_dir)  # its tables and how answers were made
        if result.status in (FAIL, ERROR):
            result.logs = _keep_logs(cluster, logs_dir)
        cluster.close()
    return result


def _keep_locust_summary(swarm: Swarm, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        shutil.copyfile(swarm.log, folder / "locust.log")


def _keep_logs(cluster: Cluster, folder: Path) -> dict[str, Path]:
    """Copy the process logs (and Locust's) out of the stack's folder before it is removed."""
    folder.mkdir(parents=True, exist_ok=True)
    kept: dict[str, Path] = {}
    for path in sorted(cluster.stack.workdir.glob("*.log")):
        target = folder / path.name
        shutil.copyfile(path, target)
        kept[path.stem] = target
    return kept

"""The scenario catalogue: for each, the processes, gateway models, load, faults and objective.

Every scenario runs steady load for ``before`` seconds, keeps its faults on for ``fault``
seconds, then watches recovery for ``after`` seconds. The last three need gateway features
that are being added (voting, fallback, Redis state); they are written against the planned
config and skipped with "not run: needs ..." while ``gateway check-config`` rejects it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loadtests.chaos import actions as act
from loadtests.chaos import hardware as hw
from loadtests.chaos.actions import Action
from loadtests.chaos.cluster import Topology
from loadtests.chaos.objectives import Objective

MLP, SVM, FOREST, FALLBACK = "digits-mlp", "digits-svm", "digits-forest", "digits-logreg"
DEADLINE_MS = 1000


@dataclass(frozen=True, slots=True)
class Timing:
    before: float
    fault: float
    after: float

    @property
    def total(self) -> float:
        return self.before + self.fault + self.after


FULL = Timing(before=5.0, fault=6.0, after=5.0)
SMOKE = Timing(before=2.0, fault=3.0, after=2.5)


@dataclass(frozen=True, slots=True)
class Fault:
    """``begin`` at ``at`` s; ``end`` at ``until`` s (None: the window is ``begin``'s run)."""

    label: str
    at: float
    begin: tuple[Action, ...]
    until: float | None = None
    end: tuple[Action, ...] = ()


Timeline = Callable[[Timing], list[Fault]]


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    topology: Topology
    models: dict[str, Any]
    users: tuple[str, ...]  # Locust user classes
    timeline: Timeline
    objective: Objective
    needs: str | None = None  # the gateway feature the config depends on
    user_count: int = 16
    rate: float = 20.0  # requests/s per user
    expect: str = ""  # what a correct gateway does, in a line, for the report
    checks: hw.HardwareCheck | None = None  # checks read from the gateway after the run


def window(label: str, begin: Sequence[Action], end: Sequence[Action]) -> Timeline:
    """One fault window over the whole fault phase."""
    return lambda t: [Fault(label, t.before, tuple(begin), t.before + t.fault, tuple(end))]


def rolling(pool: str, count: int) -> Timeline:
    """Restart each replica in turn, evenly spread over the fault phase."""
    return lambda t: [
        Fault(f"restart {i}", t.before + i * t.fault / count, (act.restart(pool, [i]),))
        for i in range(count)
    ]


def _plain(**extra: Any) -> dict[str, Any]:
    return {"digits": {"pool": MLP, "timeout_ms": DEADLINE_MS, **extra}}


THREE = Topology(pools=((MLP, 3),))
# The hardware scenarios: mlp-0's GPU is injected (`replicas.accelerator_inject`): slowdown at
# 90 °C, shutdown at 95 °C. The ramp climbs 70 -> 100 °C over the fault phase; the kill comes
# when it reaches shutdown, and the dead replica stays dead (no restart: a new process's
# start-up would load the machine the comparison runs on).
SAMPLE_S = 0.25
SENSED = Topology(
    pools=((MLP, 3),),
    accelerator={"interval_s": SAMPLE_S, "lead_s": 3.0, "fit_s": 2.0, "healthy_for_s": 2.0},
)
RAMP_FROM, RAMP_TO, SHUTDOWN_C = 70.0, 100.0, 95.0


def overheat(t: Timing) -> list[Fault]:
    kill_at = t.before + t.fault * (SHUTDOWN_C - RAMP_FROM) / (RAMP_TO - RAMP_FROM)
    ramp = {"temperature_ramp": {"from": RAMP_FROM, "to": RAMP_TO, "over_s": t.fault}}
    return [
        Fault("ramp mlp-0 to 100 °C", t.before, (act.set_faults(MLP, [0], accelerator=ramp),)),
        Fault("SIGKILL mlp-0 at shutdown", kill_at, (act.kill(MLP, [0]),)),
    ]


def ecc(t: Timing) -> list[Fault]:
    """The error at the start of the fault phase; a good device again at its end (the GPU
    reset), so the restore after ``healthy_for_s`` shows in the run."""
    dbe = act.set_faults(MLP, [0], accelerator={"ecc_dbe_total": 1})
    reset = act.set_faults(MLP, [0], accelerator={"ecc_dbe_total": 0, "temperature_c": 50})
    return [Fault("DBE on mlp-0", t.before, (dbe,), t.before + t.fault, (reset,))]


STRICT = Objective(max_failed_rate=0.0, max_late_rate=0.0, max_wrong_rate=0.001)
# The signals-off comparisons show what the crash costs (retries, late answers): loose bounds.
COMPARISON = Objective(max_failed_rate=0.01, max_late_rate=0.02, max_wrong_rate=0.001)
DIGITS = ("DigitsUser",)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "crash",
        "Replica crash: SIGKILL 1 of 3, restarted after the fault",
        THREE,
        _plain(),
        DIGITS,
        window("SIGKILL mlp-0", [act.kill(MLP, [0])], [act.restart(MLP, [0])]),
        STRICT,
        expect="requests caught on the dead replica are retried on another; nothing is lost",
    ),
    Scenario(
        "hang",
        "Hung replica: 1 of 3 holds every request (hang=true)",
        THREE,
        _plain(),
        DIGITS,
        window("hang mlp-0", [act.set_faults(MLP, [0], hang=True)], [act.clear_faults(MLP, [0])]),
        STRICT,
        expect="a try on the hung replica is given up early and retried; it is ejected",
    ),
    Scenario(
        "freeze",
        "Frozen replica: SIGSTOP 1 of 3 (probes hang too), then SIGCONT",
        THREE,
        _plain(),
        DIGITS,
        window("SIGSTOP mlp-0", [act.pause(MLP, [0])], [act.resume(MLP, [0])]),
        STRICT,
        expect="as a hang, but the health probes time out too; back in service after SIGCONT",
    ),
    Scenario(
        "slow",
        "Slow replica: +30 ms on 1 of 3",
        THREE,
        _plain(),
        DIGITS,
        window(
            "+30 ms mlp-0", [act.set_faults(MLP, [0], latency_ms=30)], [act.clear_faults(MLP, [0])]
        ),
        Objective(max_p99_during_ms=100.0),
        expect="the slow replica gets less traffic (least outstanding); p99 stays near +30 ms",
    ),
    Scenario(
        "burst-5xx",
        "5xx burst: 2 of 3 replicas answer 500 to every request",
        THREE,
        _plain(),
        DIGITS,
        window(
            "500s on mlp-0, mlp-1",
            [act.set_faults(MLP, [0, 1], error_rate=1.0)],
            [act.clear_faults(MLP, [0, 1])],
        ),
        Objective(max_failed_rate=0.001),
        expect="retries (budgeted) land on the healthy replica while breakers open on the two",
    ),
    Scenario(
        "rolling-restart",
        "Rolling restart of all 3 replicas (SIGTERM, same port)",
        THREE,
        _plain(),
        DIGITS,
        rolling(MLP, 3),
        STRICT,
        expect="each replica drains and comes back on its port; no request is lost",
    ),
    Scenario(
        "vote-corrupt",
        "Corrupted outputs under voting: every digits-mlp answer wrong",
        Topology(pools=((MLP, 2), (SVM, 1), (FOREST, 1))),
        {
            "digits-vote": {
                "vote": {"pools": [MLP, SVM, FOREST], "quorum": 2},
                "fallback": {"model": FALLBACK},
                "timeout_ms": DEADLINE_MS,
            }
        },
        ("VoteUser",),
        window(
            "corrupt_rate=1 on mlp",
            [act.set_faults(MLP, [0, 1], corrupt_rate=1.0)],
            [act.clear_faults(MLP, [0, 1])],
        ),
        Objective(max_degraded_during=0.2),
        needs="voting (models.*.vote) with fallback",
        expect="svm and forest outvote mlp, which is quarantined; they disagree on ~3 % of "
        "rows, so a few % of requests (2 rows on average) fall back on no quorum",
    ),
    Scenario(
        "silent-corruption",
        "Silent corruption: 1 of 3 replicas of a single route corrupts 10 % of its answers",
        THREE,
        _plain(
            audit={"rate": 0.05},
            slos=[{"name": "right-answers", "kind": "correctness", "objective": 0.999}],
        ),
        DIGITS,
        window(
            "corrupt_rate=0.1 on mlp-0",
            [act.set_faults(MLP, [0], corrupt_rate=0.1)],
            [act.clear_faults(MLP, [0])],
        ),
        Objective(max_failed_rate=0.0, max_wrong_rate=0.02),
        needs="audits (models.*.audit)",
        expect="no answer fails and at most 2 % are wrong; audits of 5 % of the answers find "
        "some of mlp-0's wrong ones and strike it, but its few-second fault window is too short "
        "for the page and the quarantine (loadtests/bench_correctness.py runs the same fault for "
        "40 s and shows both)",
    ),
    Scenario(
        "all-down",
        "All replicas down: SIGKILL 3 of 3, fallback answers, restart",
        THREE,
        _plain(fallback={"model": FALLBACK}),
        DIGITS,
        window("SIGKILL all", [act.kill(MLP, [0, 1, 2])], [act.restart(MLP, [0, 1, 2])]),
        Objective(min_degraded_during=0.5, max_degraded_end=0.01),
        needs="fallback (models.*.fallback)",
        expect="the verified fallback model answers (x-degraded) until the replicas are back",
    ),
    Scenario(
        "canary-corrupt",
        "Canary rollback: the candidate (digits-svm, 5 %) corrupts half its answers",
        Topology(pools=((MLP, 3), (SVM, 1))),
        _plain(
            rollout={
                "candidate": SVM,
                "mode": "canary",
                "steps": [5, 100],
                "hold_s": 60,
                "agreement_target": 0.95,
                "min_comparisons": 30,
            }
        ),
        DIGITS,
        window(
            "corrupt_rate=0.5 on svm",
            [act.set_faults(SVM, [0], corrupt_rate=0.5)],
            [act.clear_faults(SVM, [0])],
        ),
        Objective(max_failed_rate=0.0, max_wrong_rate=0.01),
        needs="rollouts (models.*.rollout)",
        expect="the canary's comparisons disagree at once: rolled back (rule:agreement) within "
        "seconds, every request back on mlp; wrong answers stay far under 1 %",
    ),
    Scenario(
        "redis-down",
        "Redis down: SIGKILL redis-server mid-run, restart it",
        Topology(pools=((MLP, 3),), redis=True),
        _plain(),
        DIGITS,
        window("redis down", [act.kill_redis()], [act.start_redis()]),
        STRICT,
        needs="Redis state (state.backend: redis)",
        expect="Redis is off the request path: serving goes on on local state",
    ),
    Scenario(
        "gpu-overheat",
        "GPU overheating: mlp-0's temperature ramps to shutdown, then SIGKILL",
        SENSED,
        _plain(),
        DIGITS,
        overheat,
        STRICT,
        user_count=8,
        checks=hw.drained_before("SIGKILL", 1.0, "mlp-0"),
        expect="the temperature's trend drains mlp-0 seconds before the kill: nothing lost, "
        "no retry",
    ),
    Scenario(
        "gpu-overheat-off",
        "GPU overheating with the accelerator signals off (the same run)",
        THREE,
        _plain(),
        DIGITS,
        overheat,
        COMPARISON,
        user_count=8,
        checks=hw.no_drain_and_retries("mlp-0"),
        expect="nothing sees it coming: the crash costs retries and an ejection",
    ),
    Scenario(
        "gpu-ecc",
        "Uncorrectable ECC error on mlp-0's GPU under load",
        SENSED,
        _plain(),
        DIGITS,
        ecc,
        STRICT,
        user_count=8,
        checks=hw.drained_within("accelerator=", 2 * SAMPLE_S),
        expect="mlp-0 drained within two sample intervals; its requests in flight finish",
    ),
    Scenario(
        "gpu-ecc-off",
        "Uncorrectable ECC error with the accelerator signals off",
        THREE,
        _plain(),
        DIGITS,
        ecc,
        COMPARISON,
        user_count=8,
        checks=hw.no_drain(),
        expect="mlp-0 keeps serving on a GPU that has lost data",
    ),
)

BY_NAME = {s.name: s for s in SCENARIOS}
SMOKE_SCENARIO = "crash"

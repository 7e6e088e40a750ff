"""Pass or fail: a scenario's objective checked against the statistics of its run.

Each bound is one `Check` with the bound and the measured value written out, so the report
shows why a run failed, not only that it did. Unset bounds are not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from loadtests.chaos.stats import Run, Window

SMOKE_FLOOR = 0.01  # smoke runs on a busy CI machine: failed and late rates up to 1 %


@dataclass(frozen=True, slots=True)
class Objective:
    """What a run must show; rates are shares (0.001 = 0.1 %)."""

    max_failed_rate: float = 0.0  # failed / sent, whole run
    max_late_rate: float = 0.0  # slower than the deadline / sent, whole run
    max_wrong_rate: float = 0.001  # wrong / answered, whole run
    min_degraded_during: float | None = None  # degraded / answered while faults are on
    max_degraded_during: float | None = None
    max_p99_during_ms: float | None = None
    recover_s: float = 2.0  # the run's last seconds: no failed request
    max_degraded_end: float | None = None  # ... and at most this degraded share
    min_sent: int = 50  # the run happened at all

    def relaxed(self, floor: float = SMOKE_FLOOR) -> Objective:
        """The same objective with failed and late rates allowed up to ``floor`` (smoke)."""
        return replace(
            self,
            max_failed_rate=max(self.max_failed_rate, floor),
            max_late_rate=max(self.max_late_rate, floor),
        )

    def describe(self) -> str:
        parts = [
            f"failed {at_most(self.max_failed_rate)}",
            f"over deadline {at_most(self.max_late_rate)}",
            f"wrong {at_most(self.max_wrong_rate)}",
        ]
        if self.min_degraded_during is not None:
            parts.append(f"degraded during ≥ {pct(self.min_degraded_during)}")
        if self.max_degraded_during is not None:
            parts.append(f"degraded during ≤ {pct(self.max_degraded_during)}")
        if self.max_p99_during_ms is not None:
            parts.append(f"p99 during ≤ {self.max_p99_during_ms:g} ms")
        parts.append(f"no failure in the last {self.recover_s:g} s")
        if self.max_degraded_end is not None:
            parts.append(f"degraded there ≤ {pct(self.max_degraded_end)}")
        return ", ".join(parts)


def pct(share: float) -> str:
    return f"{share * 100:.3g} %" if share else "0"


def at_most(share: float) -> str:
    return f"≤ {pct(share)}" if share else "= 0"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    bound: str
    actual: str
    passed: bool


@dataclass(frozen=True, slots=True)
class ObjectiveVerdict:
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


def _rate(count: int, share: float) -> str:
    return f"{count} ({share * 100:.3g} %)"


def evaluate(objective: Objective, run: Run, windows: Sequence[Window]) -> ObjectiveVerdict:
    whole = run.overall()
    during = run.phases(windows)["during"]
    end = run.duration_s
    tail = run.between(max(0.0, end - objective.recover_s), end + 1e-6)
    checks = [
        Check(
            "requests", f"≥ {objective.min_sent}", str(whole.sent), whole.sent >= objective.min_sent
        ),
        Check(
            "failed",
            at_most(objective.max_failed_rate),
            _rate(whole.failed, whole.failed_rate),
            whole.failed_rate <= objective.max_failed_rate,
        ),
        Check(
            "over deadline",
            at_most(objective.max_late_rate),
            _rate(whole.late, whole.late / whole.sent if whole.sent else 0.0),
            whole.late <= objective.max_late_rate * whole.sent,
        ),
        Check(
            "wrong answers",
            at_most(objective.max_wrong_rate),
            _rate(whole.wrong, whole.wrong_rate),
            whole.wrong_rate <= objective.max_wrong_rate,
        ),
    ]
    if objective.min_degraded_during is not None:
        checks.append(
            Check(
                "degraded during fault",
                f"≥ {pct(objective.min_degraded_during)}",
                _rate(during.degraded, during.degraded_rate),
                during.answered > 0 and during.degraded_rate >= objective.min_degraded_during,
            )
        )
    if objective.max_degraded_during is not None:
        checks.append(
            Check(
                "degraded during fault",
                f"≤ {pct(objective.max_degraded_during)}",
                _rate(during.degraded, during.degraded_rate),
                during.degraded_rate <= objective.max_degraded_during,
            )
        )
    if objective.max_p99_during_ms is not None:
        checks.append(
            Check(
                "p99 during fault",
                f"≤ {objective.max_p99_during_ms:g} ms",
                f"{during.p99_ms:.1f} ms",
                during.p99_ms <= objective.max_p99_during_ms,
            )
        )
    checks.append(
        Check(
            f"failed in last {objective.recover_s:g} s",
            "0",
            str(tail.failed),
            tail.sent > 0 and tail.failed == 0,
        )
    )
    if objective.max_degraded_end is not None:
        checks.append(
            Check(
                f"degraded in last {objective.recover_s:g} s",
                f"≤ {pct(objective.max_degraded_end)}",
                _rate(tail.degraded, tail.degraded_rate),
                tail.degraded_rate <= objective.max_degraded_end,
            )
        )
    return ObjectiveVerdict(tuple(checks))

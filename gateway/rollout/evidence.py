"""What a rollout has seen: comparisons of answers, the candidate's errors, both latencies.

`RolloutEvidence` is a mutable tally kept per step (a step is judged on its own evidence) and in
total (for people); `Wilson` gives the agreement rate's confidence interval, which is what
decides: a rate of 0.8 over 5 comparisons says little, over 500 it says no. Comparisons count
answers (a request, whatever its rows): rows of one answer are not independent draws.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

# the latest latencies kept per side, for p50/p99
LATENCY_SAMPLES = 512


def wilson(successes: int, trials: int, z: float) -> tuple[float, float]:
    """The Wilson score interval of ``successes / trials`` at ``z`` (0..1 both ends)."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    centre = p + z2 / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    denominator = 1 + z2 / trials
    return max(0.0, (centre - spread) / denominator), min(1.0, (centre + spread) / denominator)


def quantile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    # nearest rank
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(slots=True)
class RolloutEvidence:
    """Counts since the step began (or the rollout, for the total)."""

    compared: int = 0
    agreed: int = 0
    # output -> answers differing
    disagreements: Counter[str] = field(default_factory=Counter)
    # a shadow copy failed (its answer missing), by either side
    compare_errors: int = 0
    # copies not sent: over the concurrency or the rate bound
    shadow_shed: int = 0
    # served by the candidate (canary)
    candidate_requests: int = 0
    candidate_errors: int = 0
    candidate_latency: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    current_latency: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))

    def comparison(self, agreed: bool, differing: list[str]) -> None:
        self.compared += 1
        self.agreed += int(agreed)
        self.disagreements.update(differing)

    def interval(self, z: float) -> tuple[float, float]:
        return wilson(self.agreed, self.compared, z)

    @property
    def agreement(self) -> float | None:
        return self.agreed / self.compared if self.compared else None

    @property
    def error_rate(self) -> float | None:
        return self.candidate_errors / self.candidate_requests if self.candidate_requests else None

    def p99(self, side: str) -> float | None:
        samples = self.candidate_latency if side == "candidate" else self.current_latency
        return quantile(list(samples), 0.99)

    def to_json(self, z: float) -> dict[str, Any]:
        low, high = self.interval(z)
        doc: dict[str, Any] = {
            "compared": self.compared,
            "agreed": self.agreed,
            "agreement": _round(self.agreement),
            "interval": [round(low, 4), round(high, 4)],
            "disagreements": dict(self.disagreements),
            "compare_errors": self.compare_errors,
            "shadow_shed": self.shadow_shed,
            "candidate_requests": self.candidate_requests,
            "candidate_errors": self.candidate_errors,
        }
        for side, samples in (
            ("candidate", self.candidate_latency),
            ("current", self.current_latency),
        ):
            values = list(samples)
            doc[f"{side}_latency_ms"] = {
                "p50": _ms(quantile(values, 0.5)),
                "p99": _ms(quantile(values, 0.99)),
            }
        return doc


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)

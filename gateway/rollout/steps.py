"""The canary's rule: hold, advance, promote or roll back, from one step's evidence.

A pure function of the declaration, the step, its evidence, how long it has been held and
whether the model's SLOs burn fast: the controller applies what it says, tests call it on
numbers. Rolling back needs confidence (the agreement interval's upper end below the target,
the error rate's lower end above its bound) so that one unlucky comparison does not undo a
good candidate; advancing needs enough comparisons and the point estimates within bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.config.rollout import RolloutConfig
from gateway.rollout.evidence import RolloutEvidence, wilson

# comparisons (or candidate requests) before the evidence may say no
MIN_TO_REJECT = 10

Action = Literal["hold", "advance", "promote", "rollback"]


@dataclass(frozen=True, slots=True)
class CanaryMove:
    action: Action
    # which rule decided: agreement | errors | latency | slo_burn | evidence | hold
    rule: str
    why: str


def next_move(
    config: RolloutConfig, step: int, evidence: RolloutEvidence, held_s: float, burning: bool
) -> CanaryMove:
    """What the evidence of step ``step`` (an index into ``config.steps``) says now."""
    z = config.confidence_z
    low, high = evidence.interval(z)
    target = config.agreement_target
    if evidence.compared >= MIN_TO_REJECT and high < target:
        why = (
            f"agreement {evidence.agreed}/{evidence.compared}, interval "
            f"[{low:.3f}, {high:.3f}] below {target}"
        )
        return CanaryMove("rollback", "agreement", why)
    requests, errors = evidence.candidate_requests, evidence.candidate_errors
    if requests >= config.min_requests_for_errors:
        error_low, _ = wilson(errors, requests, z)
        if error_low > config.max_error_rate:
            return CanaryMove(
                "rollback",
                "errors",
                f"candidate errors {errors}/{requests}, "
                f"at least {error_low:.3f} > {config.max_error_rate}",
            )
    slow = _too_slow(config, evidence)
    if slow is not None:
        return CanaryMove("rollback", "latency", slow)
    if burning:
        return CanaryMove("rollback", "slo_burn", "the model's SLOs burn fast (page alert firing)")
    held = held_s >= config.hold_s or requests >= config.hold_requests
    if not held:
        return CanaryMove(
            "hold",
            "hold",
            f"held {held_s:.1f}/{config.hold_s} s, {requests}/{config.hold_requests} requests",
        )
    agreement = evidence.agreement
    if evidence.compared < config.min_comparisons or agreement is None:
        return CanaryMove(
            "hold", "evidence", f"{evidence.compared}/{config.min_comparisons} comparisons"
        )
    if agreement < target:
        return CanaryMove("hold", "agreement", f"agreement {agreement:.4f} below {target}")
    rate = evidence.error_rate or 0.0
    if rate > config.max_error_rate:
        return CanaryMove("hold", "errors", f"error rate {rate:.4f} above {config.max_error_rate}")
    last = step >= len(config.steps) - 1
    why = (
        f"agreement {evidence.agreed}/{evidence.compared} ({low:.3f}..{high:.3f}), "
        f"errors {errors}/{requests}"
    )
    return CanaryMove("promote" if last else "advance", "evidence", why)


def _too_slow(config: RolloutConfig, evidence: RolloutEvidence) -> str | None:
    """The candidate's p99 over its bound (a ratio of the pool's, plus slack), once both
    sides have enough samples for a p99 that is not just their slowest one."""
    enough = config.min_requests_for_latency
    if len(evidence.candidate_latency) < enough or len(evidence.current_latency) < enough:
        return None
    mine, theirs = evidence.p99("candidate"), evidence.p99("current")
    if mine is None or theirs is None:
        return None
    bound = theirs * config.max_latency_ratio + config.latency_slack_ms / 1000
    if mine <= bound:
        return None
    return f"candidate p99 {mine * 1000:.1f} ms over {bound * 1000:.1f} ms"

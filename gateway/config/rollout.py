"""A model's rollout: a candidate pool beside the model's pool, judged by its answers.

``models.<name>.rollout`` declares it; its progress (the step, the decisions taken, their
evidence) is state kept by `gateway.rollout` (durable, shared), not config. ``mode``:

- ``shadow``: a share of live requests (``shadow_percent``) is also sent to the candidate off
  the client's path and the answers are compared; clients are always answered by the pool;
- ``canary``: the candidate serves ``steps`` percent of requests in turn, each step held
  ``hold_s`` seconds or ``hold_requests`` candidate requests (whichever comes first) and left
  only on good evidence; a sample (``compare_percent``) of the canary's requests is also sent
  to the pool and compared. At the last step (100) good evidence promotes the candidate.

Every number here is part of the declaration: a reload that changes any of them restarts the
rollout; one that keeps them keeps its progress.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Literal

from pydantic import Field, field_validator

from gateway.frozen import Frozen

DEFAULT_STEPS = (1.0, 5.0, 25.0, 50.0, 100.0)


class RolloutConfig(Frozen):
    """The candidate, how it is tried and what evidence moves it on or back."""

    candidate: str = Field(min_length=1, description="the pool being rolled out")
    mode: Literal["shadow", "canary"] = Field(
        "shadow", description="shadow: copies, never answers; canary: serves a stepped share"
    )
    auto_start: bool = Field(True, description="starts at load; false: waits for POST start")
    shadow_percent: float = Field(100.0, ge=0, le=100, description="shadow: requests copied")
    steps: tuple[float, ...] = Field(DEFAULT_STEPS, min_length=1, description="canary shares %")
    hold_s: float = Field(300.0, gt=0, description="a step is held at least this long...")
    hold_requests: int = Field(
        1000, ge=1, description="...or until the candidate served this many requests there"
    )
    compare_percent: float = Field(100.0, ge=0, le=100, description="canary requests compared")
    agreement_target: float = Field(0.99, gt=0, le=1, description="answers agreeing, at least")
    min_comparisons: int = Field(100, ge=1, description="comparisons a step needs to advance")
    confidence_z: float = Field(1.96, gt=0, description="Wilson interval's z (1.96: 95 %)")
    max_error_rate: float = Field(0.01, ge=0, le=1, description="candidate errors, at most")
    min_requests_for_errors: int = Field(20, ge=1, description="before error rates are judged")
    # A p99 over fewer samples is their one or two slowest: a clean candidate's first, cold
    # request (new connection, first run of its runtime) would roll it back on its own.
    min_requests_for_latency: int = Field(
        200, ge=1, description="latency samples each side needs before p99s are compared"
    )
    max_latency_ratio: float = Field(
        2.0, gt=0, description="candidate p99 over the pool's p99, at most"
    )
    latency_slack_ms: float = Field(5.0, ge=0, description="added to the bound (tiny p99s)")
    label_outputs: tuple[str, ...] = Field(("label",), description="compared exactly")
    numeric_atol: float = Field(1e-3, ge=0, description="absolute tolerance of numeric outputs")
    numeric_rtol: float = Field(1e-2, ge=0, description="relative tolerance of numeric outputs")
    shadow_concurrency: int = Field(16, ge=1, description="shadow copies in flight, at most")
    shadow_rate_per_s: float = Field(200.0, gt=0, description="shadow copies per second, at most")
    shadow_timeout_ms: int = Field(2000, gt=0, description="a shadow copy's own deadline")
    shed_loop_lag_ms: float = Field(
        5.0,
        gt=0,
        description="copies are not sent while the gateway's event loop runs timers "
        "this late (its CPU is saturated): shed before clients wait",
    )

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0 < s <= 100 for s in steps):
            raise ValueError("every step is a share in (0, 100]")
        if any(b <= a for a, b in pairwise(steps)):
            raise ValueError("steps must increase")
        if steps[-1] != 100:
            raise ValueError(
                "the last step is 100 (the candidate serves everything, then is promoted)"
            )
        return steps

"""Request and replica policies as frozen config objects, one per mechanism.

Each mechanism (health probes, outlier ejection, breakers, retries, budget, admission,
hedging, voting, fallback) has its own small config, as Envoy keeps them apart, so a
change to one never ripples into the others.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.config.tensors import TensorMapping
from gateway.frozen import Frozen


class HealthCheckConfig(Frozen):
    """Active readiness probes, one loop per replica (Envoy's health_checks, simplified)."""

    interval_s: float = Field(0.5, gt=0, le=60, description="time between two probes of a replica")
    jitter: float = Field(0.2, ge=0, le=1, description="each interval varies by up to this share")
    timeout_s: float = Field(0.5, gt=0, description="a probe not answered in this time fails")
    healthy_threshold: int = Field(2, ge=1, description="passes in a row that make it healthy")
    unhealthy_threshold: int = Field(2, ge=1, description="failures in a row: unhealthy")
    healthy_edge_interval_s: float = Field(
        0.1, gt=0, le=60, description="interval between passes while an unhealthy one recovers"
    )


class OutlierConfig(Frozen):
    """Passive outlier ejection from live traffic (Envoy's consecutive_5xx, simplified), and a
    streak that lasts: failures in a row over ``failing_for_s`` eject however few they are."""

    consecutive_failures: int = Field(5, ge=1, description="charged failures in a row that eject")
    failing_for_s: float = Field(
        10.0,
        ge=0,
        description="failures in a row (2 or more) spanning this long eject too, however few: "
        "a hung replica that load-aware routing starves of traffic answers none of the few "
        "tries it gets; 0: off",
    )
    base_ejection_s: float = Field(2.0, gt=0, description="first ejection; grows linearly")
    max_ejection_s: float = Field(30.0, gt=0, description="the longest an ejection lasts")
    max_ejection_percent: int = Field(
        50, ge=0, le=100, description="at most this share of a pool is ejected at once"
    )


class BreakerConfig(Frozen):
    """Per-replica circuit breaker (pybreaker under an adapter with an injected clock)."""

    failure_threshold: int = Field(5, ge=1, description="consecutive failures that open it")
    reset_timeout_s: float = Field(2.0, gt=0, description="open -> half-open after this")
    success_threshold: int = Field(2, ge=1, description="half-open passes that close it")
    half_open_max_calls: int = Field(
        1, ge=1, description="concurrent trial attempts while half-open"
    )


class TryTimeoutConfig(Frozen):
    """Per-try timeout learned from the pool's observed latency, when a retry is still possible.

    ``multiplier × quantile`` of recent successful attempts, within [min_ms, time left]; the
    last possible attempt always gets all the time left. A hung replica then costs one short
    try instead of the whole deadline.
    """

    adaptive: bool = Field(True, description="false: every try may take all the time left")
    quantile: float = Field(0.99, gt=0, lt=1, description="the latency quantile it is learned from")
    multiplier: float = Field(3.0, ge=1, description="the timeout is this many times the quantile")
    min_ms: float = Field(20.0, gt=0, description="the shortest learned per-try timeout")
    min_samples: int = Field(20, ge=1, description="successful attempts seen before it is learned")
    cold_ms: float = Field(250.0, gt=0, description="per-try timeout before min_samples")


class RetryConfig(Frozen):
    """Bounded retries with exponential backoff and full jitter, each on an untried replica."""

    max_attempts: int = Field(3, ge=1, description="attempts in all, the first included")
    backoff_base_ms: float = Field(
        25.0, ge=0, description="the first backoff's cap; doubles per retry (full jitter)"
    )
    backoff_max_ms: float = Field(250.0, ge=0, description="the largest backoff's cap")
    try_timeout: TryTimeoutConfig = Field(
        TryTimeoutConfig(), description="per-try timeouts learned from the pool's latency"
    )


class RetryBudgetConfig(Frozen):
    """Gateway-wide cap on retries: ``ratio`` of requests plus ``min_per_s`` (Finagle/Linkerd)."""

    ratio: float = Field(0.2, ge=0, description="retries allowed per request, on average")
    min_per_s: float = Field(10.0, ge=0, description="retries a second allowed whatever the ratio")
    window_s: float = Field(
        10.0, gt=0, description="the window requests and retries are counted in"
    )


class AdmissionConfig(Frozen):
    """Bound on in-flight requests per model; beyond it requests are shed at once.

    The bound is shared by the tenants by weight (`gateway.admission.fair_share`);
    ``tenant_reserve``: the part of each tenant's share that the others may not borrow while
    it uses less than its share (0: they may borrow all of it, first come as one tenant).
    """

    max_in_flight: int = Field(256, ge=1, description="requests in flight at once; past it: shed")
    retry_after_s: float = Field(1.0, gt=0, description="the Retry-After of a shed request")
    tenant_reserve: float = Field(0.25, ge=0, le=1, description="share kept for each tenant")


class HedgeConfig(Frozen):
    """Tail-latency hedging: one more copy after the pool's observed latency quantile."""

    enabled: bool = Field(False, description="send a hedge (budgeted like a retry)")
    quantile: float = Field(
        0.95, gt=0, lt=1, description="the hedge goes after this latency quantile"
    )
    min_delay_ms: float = Field(5.0, ge=0, description="never sooner than this")
    min_samples: int = Field(50, ge=1, description="attempts seen before any hedge is sent")


class VoteConfig(Frozen):
    """N-version voting over distinct pools (diverse model versions)."""

    pools: tuple[str, ...] = Field(min_length=2, description="the pools voting, one leg each")
    quorum: int = Field(2, ge=1, description="legs that must agree for an answer")
    label_outputs: tuple[str, ...] = Field(
        ("label",), description="outputs compared exactly (by majority); other numbers by tolerance"
    )
    outputs: tuple[str, ...] | None = Field(
        None,
        description="what every leg is asked for (client names) when the client names no "
        "outputs; default: the label outputs",
    )
    numeric_atol: float = Field(1e-3, ge=0, description="absolute tolerance of numeric outputs")
    numeric_rtol: float = Field(1e-2, ge=0, description="relative tolerance of numeric outputs")
    straggler_grace_ms: float = Field(20.0, ge=0, description="wait after a quorum agrees")
    suspect_window: int = Field(200, ge=10, description="last votes kept per replica")
    suspect_min_votes: int = Field(100, ge=1, description="votes seen before a replica is judged")
    suspect_ratio: float = Field(0.08, gt=0, le=1, description="dissent share to quarantine")
    quarantine_s: float = Field(60.0, gt=0, description="how long a dissenter stays out")

    @model_validator(mode="after")
    def _quorum(self) -> VoteConfig:
        if self.quorum > len(self.pools):
            raise ValueError(f"quorum {self.quorum} exceeds the {len(self.pools)} pools")
        if len(set(self.pools)) != len(self.pools):
            raise ValueError("vote pools must be distinct")
        if self.outputs is not None and len(set(self.outputs)) != len(self.outputs):
            raise ValueError("vote outputs must be distinct")
        return self

    @property
    def compared_outputs(self) -> tuple[str, ...] | None:
        """What legs are asked for when the client names nothing (None: nothing in particular,
        for a vote with neither ``outputs`` nor ``label_outputs``)."""
        if self.outputs:
            return self.outputs
        return self.label_outputs or None


FallbackReason = Literal["no_replica", "exhausted", "deadline", "no_quorum"]


class FallbackConfig(Frozen):
    """Answer from the verified in-process model when the primary path cannot."""

    model: str = Field(min_length=1, description="a model of fallback_models/MANIFEST.json")
    on: tuple[FallbackReason, ...] = Field(
        ("no_replica", "exhausted", "deadline", "no_quorum"),
        description="when it answers: no admissible replica, every attempt failed, no time left, "
        "no quorum",
    )
    reserve_ms: float = Field(20.0, ge=0, description="time kept back for the fallback")
    tensors: TensorMapping = Field(
        default_factory=TensorMapping, description="the fallback model's tensor names, shapes"
    )


class GoldenProbeConfig(Frozen):
    """Correctness probes: known inputs to every replica, answers compared with expected."""

    file: str = Field(description="golden set JSON: inputs, labels, min_accuracy")
    interval_s: float = Field(5.0, gt=0, description="time between two probes of a replica")
    rows: int = Field(20, ge=1, description="golden rows per probe")
    min_accuracy: float | None = Field(None, ge=0, le=1, description="default: the golden set's")
    failures_to_quarantine: int = Field(2, ge=1, description="failed probes in a row: quarantine")
    quarantine_s: float = Field(60.0, gt=0, description="how long a quarantine lasts")
    input: str = Field("input", min_length=1, description="the input, in the client's names")
    label_output: str = Field("label", min_length=1, description="the integer labels output")
    scores_output: str | None = Field(
        "probabilities", description="per-class scores, checked when the reply has them"
    )

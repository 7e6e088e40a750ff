"""A model's audits: a sampled share of its single-route answers asked again and compared.

``models.<name>.audit`` declares them. An audit is sent off the client's path once the client's
answer is written, to another replica of the ``against`` pool (another version of the model)
or, without it, of the model's own pool; the two answers are compared as a vote compares them,
and a disagreement is settled by a third opinion. What audits find feeds the model's
``correctness`` SLOs and the suspects' records (`gateway.pipeline.audit`).
"""

from __future__ import annotations

from pydantic import Field

from gateway.frozen import Frozen


class AuditConfig(Frozen):
    """How many answers are audited, against what, within which bounds, and what a strike
    costs a replica found on the wrong side."""

    rate: float = Field(gt=0, le=1, description="share of the model's answers audited, e.g. 0.02")
    against: str | None = Field(
        None,
        description="the pool the audits go to (another version of the model); default: "
        "another replica of the model's own pool",
    )
    max_in_flight: int = Field(
        16, ge=1, description="audits in flight at most, gateway-wide (each worker its share)"
    )
    max_per_s: float = Field(
        100.0, gt=0, description="audits sent per second at most, gateway-wide (each its share)"
    )
    timeout_ms: int = Field(2000, gt=0, description="an audit's own deadline (one try)")
    label_outputs: tuple[str, ...] = Field(
        ("label",), description="outputs compared exactly; other numbers within the tolerance"
    )
    numeric_atol: float = Field(1e-3, ge=0, description="absolute tolerance of numeric outputs")
    numeric_rtol: float = Field(1e-2, ge=0, description="relative tolerance of numeric outputs")
    suspect_window: int = Field(200, ge=10, description="last audited rows kept per replica")
    suspect_min_votes: int = Field(
        100, ge=1, description="audited rows seen before a replica is judged"
    )
    suspect_ratio: float = Field(
        0.08, gt=0, le=1, description="share of its audited rows found wrong to quarantine"
    )
    quarantine_s: float = Field(60.0, gt=0, description="how long a replica found wrong stays out")

"""SLO and burn-policy configuration: frozen, validated pydantic models, one per concept.

An SLO names what counts as a good event (answered without a 5xx, or answered in time), the
objective and the compliance window; the burn policy says how the gateway tightens a model's
request policy while its error budget burns fast. Both are checked once, at load time.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gateway.frozen import Frozen

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # also safe inside shared-state keys
# An availability SLO's floor on client deadlines when none is configured: shorter deadlines
# ask for more than the digits path promises (its p99 on a busy machine, docs/measured.md).
DEFAULT_MIN_DEADLINE_MS = 100.0


class SloConfig(Frozen):
    """One SLO of one model (and optionally one tenant).

    ``availability``: good = answered without a 5xx (degraded answers are good, and counted
    on their own). ``latency``: good = answered without a 5xx within ``threshold_ms``, as the
    client saw it. ``correctness``: good = an answer not shown wrong: its events are the
    model's audited answers, its replicas' golden probe results and, while it is served by a
    vote, its answers (bad: served without a quorum); see `gateway.slo.correctness`.

    A request whose own deadline (``x-request-timeout-ms``) is shorter than ``min_deadline_ms``
    (default: ``threshold_ms`` for a latency SLO, `DEFAULT_MIN_DEADLINE_MS` otherwise) is the
    client's choice, not a promise of the service: it is counted apart (``excluded``), never
    in the SLO's events, so it cannot burn the error budget or engage the burn policy.
    """

    name: str = Field(pattern=NAME_PATTERN, description="unique within the model")
    kind: Literal["availability", "latency", "correctness"] = Field(
        description="availability: answered without a 5xx; latency: that, within threshold_ms; "
        "correctness: answers not shown wrong (audits, golden probes, votes without a quorum)"
    )
    objective: float = Field(gt=0, lt=1, description="share of good events, e.g. 0.999")
    window_days: float = Field(30.0, gt=0, le=366, description="compliance window")
    threshold_ms: float | None = Field(None, gt=0, description="latency SLOs only")
    tenant: str | None = Field(None, min_length=1, description="count only this tenant")
    min_deadline_ms: float | None = Field(None, gt=0, description="shorter deadlines: excluded")

    @model_validator(mode="after")
    def _threshold_matches_kind(self) -> SloConfig:
        if self.kind == "latency" and self.threshold_ms is None:
            raise ValueError(f"slo {self.name!r}: a latency SLO needs threshold_ms")
        if self.kind != "latency" and self.threshold_ms is not None:
            raise ValueError(f"slo {self.name!r}: threshold_ms is for latency SLOs only")
        if self.kind == "correctness" and (self.tenant is not None or self.min_deadline_ms):
            raise ValueError(
                f"slo {self.name!r}: a correctness SLO counts judged answers, not a tenant's "
                "requests: no tenant or min_deadline_ms"
            )
        return self

    @property
    def window_s(self) -> float:
        return self.window_days * 86_400.0

    @property
    def min_deadline_s(self) -> float:
        """Client deadlines shorter than this are excluded from the SLO."""
        floor = self.min_deadline_ms or self.threshold_ms or DEFAULT_MIN_DEADLINE_MS
        return floor / 1000.0

    @property
    def error_budget(self) -> float:
        """The share of events allowed to be bad, ``1 - objective``."""
        return 1.0 - self.objective


class VoteEscalationConfig(Frozen):
    """The burn policy's vote: while a model's correctness SLO burns fast, its requests are
    served by a vote over ``k`` of its ``vote_pools`` instead of its single route.

    Off by default. ``max_extra_in_flight`` caps the replica capacity the vote takes beyond the
    single route (its extra legs in flight, gateway-wide; each worker its share): past it a
    request takes the single route. The model goes back to its single route once no
    correctness alert has fired for ``recover_s``.
    """

    enabled: bool = Field(False, description="serve by a vote while a correctness SLO burns fast")
    k: int = Field(3, ge=2, description="legs of the vote: the first k of the model's vote_pools")
    recover_s: float = Field(
        60.0, gt=0, description="back to the single route after the burn stopped this long"
    )
    max_extra_in_flight: int = Field(
        64, ge=1, description="the vote's legs beyond the single route's, in flight at most"
    )

    @property
    def quorum(self) -> int:
        """A majority of the k legs."""
        return self.k // 2 + 1


class BurnPolicyConfig(Frozen):
    """How a model's request policy tightens while a fast-burn (page) alert fires.

    Off by default. While engaged: the retry budget's ratio is multiplied by
    ``retry_budget_factor``, hedging is off if ``disable_hedging``, and the time left at which
    the gateway prefers the fallback is multiplied by ``fallback_margin_factor``. Its ``vote``
    (`VoteEscalationConfig`) is a separate action, engaged by correctness SLOs alone.
    """

    enabled: bool = Field(False, description="tighten the policy while a page alert fires")
    retry_budget_factor: float = Field(
        0.5, ge=0, le=1, description="the retry budget's ratio is multiplied by this"
    )
    disable_hedging: bool = Field(True, description="no hedges while engaged")
    fallback_margin_factor: float = Field(
        2.0, ge=1, description="the fallback's reserved time is multiplied by this"
    )
    vote: VoteEscalationConfig = Field(
        VoteEscalationConfig(),
        description="while a correctness SLO burns fast: serve by a vote over the vote_pools",
    )


def unique_names(slos: tuple[SloConfig, ...]) -> tuple[SloConfig, ...]:
    """Validator helper for the model config: SLO names are unique within a model."""
    seen: set[str] = set()
    for slo in slos:
        if slo.name in seen:
            raise ValueError(f"duplicate slo name {slo.name!r}")
        seen.add(slo.name)
    return slos

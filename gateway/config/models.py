"""The whole configuration document (`GatewayConfig`), the models clients call in it
(``models.<name>``: `ModelConfig`) and its ``log`` section, with the checks that span sections:
every pool a model names exists, a replica id is used once across pools, an SLO's tenant exists.

Config is validated once at load time (never with ``assert``) so a typo fails `check-config`
with the bad key named, instead of failing a request at 3 a.m. The other sections are modules of
their own beside this one (``server.py``, ``pool.py``, ``replica.py``, ``policies.py``...).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.audit import AuditConfig
from gateway.config.policies import (
    AdmissionConfig,
    FallbackConfig,
    HedgeConfig,
    RetryBudgetConfig,
    RetryConfig,
    VoteConfig,
)
from gateway.config.pool import PoolConfig
from gateway.config.rollout import RolloutConfig
from gateway.config.server import ServerConfig
from gateway.config.signature import SignatureConfig
from gateway.config.state import StateConfig
from gateway.config.tenants import ANONYMOUS, ModelAuthConfig, TenantConfig, check_tenants
from gateway.config.upstream import UpstreamConfig, moved_to_upstream
from gateway.frozen import Frozen
from gateway.slo.config import BurnPolicyConfig, SloConfig, unique_names
from gateway.telemetry.tracing import TracingConfig

# The largest digits request a replica answers inside the shortest learned per-try timeout, so
# it is not retried onto a second replica just for being large.
DEFAULT_MAX_ROWS = 1024


class LogConfig(Frozen):
    json_lines: bool = Field(True, description="one JSON object per log line")
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="the lowest level logged"
    )


class ModelConfig(Frozen):
    """A model as clients see it: one pool or a vote over pools, and its request policy."""

    pool: str | None = Field(
        None, description="the pool that serves it (exactly one of pool and vote)"
    )
    vote: VoteConfig | None = Field(None, description="a vote over pools of diverse versions")
    fallback: FallbackConfig | None = Field(
        None, description="the verified in-process model that answers when the pools cannot"
    )
    version: str = Field("1", description="the version clients see")
    timeout_ms: int = Field(1000, gt=0, description="deadline when the client sends none")
    max_timeout_ms: int = Field(60_000, gt=0, description="cap on x-request-timeout-ms")
    max_rows: int = Field(DEFAULT_MAX_ROWS, gt=0, description="rows (first dimension) a request")
    priority: int = Field(
        0,
        ge=-1000,
        le=1000,
        description="the priority of its requests whose tenant sets none (anonymous ones "
        "included); below 0: sheddable, shed at once (503) while its pool is saturated",
    )
    retry: RetryConfig = Field(RetryConfig(), description="retries and per-try timeouts")
    admission: AdmissionConfig = Field(
        AdmissionConfig(), description="the bound on its requests in flight, shared by tenants"
    )
    hedge: HedgeConfig = Field(HedgeConfig(), description="a second copy after the pool's p95")
    slos: tuple[SloConfig, ...] = Field((), description="its SLOs, counted as clients saw them")
    burn_policy: BurnPolicyConfig = Field(
        BurnPolicyConfig(), description="how its policy tightens while an SLO burns fast"
    )
    required: bool = Field(
        True, description="the gateway's /v2/health/ready waits for this model to be ready"
    )
    signature: SignatureConfig | None = Field(
        None, description="requests are checked against it; default: the replicas' metadata"
    )
    auth: ModelAuthConfig = Field(ModelAuthConfig(), description="who may call it")
    rollout: RolloutConfig | None = Field(
        None, description="a candidate pool tried beside `pool` (shadow or canary)"
    )
    audit: AuditConfig | None = Field(
        None,
        description="a sampled share of its single-route answers asked again and compared, "
        "off the client's path (the correctness SLOs' evidence); none: no audits",
    )
    vote_pools: tuple[str, ...] = Field(
        (),
        description="the pools of diverse versions its requests are voted over while the burn "
        "policy's vote is engaged (the first burn_policy.vote.k of them)",
    )

    @field_validator("slos")
    @classmethod
    def _unique_slos(cls, slos: tuple[SloConfig, ...]) -> tuple[SloConfig, ...]:
        return unique_names(slos)

    @model_validator(mode="after")
    def _shape(self) -> ModelConfig:
        if (self.pool is None) == (self.vote is None):
            raise ValueError("a model needs exactly one of 'pool' or 'vote'")
        if self.rollout is not None and self.vote is not None:
            raise ValueError(
                "rollout: a voted model cannot be rolled out (roll out a pool of its vote "
                "as a model of its own, then name it in the vote)"
            )
        if self.rollout is not None and self.rollout.candidate == self.pool:
            raise ValueError("rollout.candidate: the candidate is the model's own pool")
        if self.timeout_ms > self.max_timeout_ms:
            raise ValueError("timeout_ms must not exceed max_timeout_ms")
        if self.audit is not None and (self.vote is not None or self.rollout is not None):
            raise ValueError(
                "audit: audits are for a single route (a vote compares every answer, a "
                "rollout compares its candidate's)"
            )
        self._check_escalation()
        return self

    def _check_escalation(self) -> None:
        escalation = self.burn_policy.vote
        if len(set(self.vote_pools)) != len(self.vote_pools):
            raise ValueError("vote_pools must be distinct")
        if not escalation.enabled:
            return
        if self.vote is not None or self.rollout is not None:
            raise ValueError("burn_policy.vote: only a single-route model is escalated to a vote")
        if len(self.vote_pools) < escalation.k:
            raise ValueError(
                f"burn_policy.vote: k={escalation.k} needs as many vote_pools "
                f"(have {len(self.vote_pools)})"
            )
        if not any(slo.kind == "correctness" for slo in self.slos):
            raise ValueError("burn_policy.vote: engaged by a correctness SLO, and none is set")

    @property
    def pools(self) -> tuple[str, ...]:
        """Every pool this model routes to."""
        return self.vote.pools if self.vote is not None else (self.pool or "",)

    @property
    def route(self) -> str:
        return "vote" if self.vote is not None else "single"

    @property
    def escalation_vote(self) -> VoteConfig | None:
        """The vote the burn policy serves this model by while it is engaged (None: never):
        the first k of its vote pools, a majority's quorum, compared as its audits compare."""
        escalation = self.burn_policy.vote
        if not escalation.enabled:
            return None
        audit = self.audit or AuditConfig(rate=1.0)
        return VoteConfig(
            pools=self.vote_pools[: escalation.k],
            quorum=escalation.quorum,
            label_outputs=audit.label_outputs,
            numeric_atol=audit.numeric_atol,
            numeric_rtol=audit.numeric_rtol,
            suspect_window=audit.suspect_window,
            suspect_min_votes=audit.suspect_min_votes,
            suspect_ratio=audit.suspect_ratio,
            quarantine_s=audit.quarantine_s,
        )

    @property
    def voted(self) -> VoteConfig | None:
        """The vote whose dissents count against replicas: its own, else its escalation's."""
        return self.vote if self.vote is not None else self.escalation_vote


class GatewayConfig(Frozen):
    server: ServerConfig = Field(
        ServerConfig(), description="listening, client limits, control plane"
    )
    upstream: UpstreamConfig = Field(
        UpstreamConfig(),
        description="the connection pool to replicas and the caps on their replies (these keys "
        "were under server: in older configs, still read there with a warning)",
    )
    retry_budget: RetryBudgetConfig = Field(
        RetryBudgetConfig(), description="the gateway-wide cap on retries and hedges"
    )
    fallback_manifest: str | None = Field(
        None, description="default: the manifest shipped in the package (gateway.fallback)"
    )
    state: StateConfig = Field(
        StateConfig(), description="where state is shared between gateway instances"
    )
    tracing: TracingConfig = Field(TracingConfig(), description="W3C trace context and OTLP export")
    log: LogConfig = Field(LogConfig(), description="the gateway's logs")
    pools: dict[str, PoolConfig] = Field(
        min_length=1, description="pools of replicas, by name: what the gateway calls upstream"
    )
    models: dict[str, ModelConfig] = Field(
        min_length=1, description="the models clients call, by the name they use"
    )
    tenants: dict[str, TenantConfig] = Field(
        default_factory=dict, description="API keys to tenants, and their limits"
    )

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        return moved_to_upstream(data) if isinstance(data, dict) else data

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, tenants: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        return check_tenants(tenants)

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        for name, model in self.models.items():
            where = f"models.{name}.pool" if model.vote is None else f"models.{name}.vote.pools"
            for pool_ref in model.pools:
                if pool_ref not in self.pools:
                    known = ", ".join(sorted(self.pools))
                    raise ValueError(f"{where}: unknown pool {pool_ref!r} (have {known})")
            if model.rollout is not None and model.rollout.candidate not in self.pools:
                known = ", ".join(sorted(self.pools))
                raise ValueError(
                    f"models.{name}.rollout.candidate: unknown pool "
                    f"{model.rollout.candidate!r} (have {known})"
                )
            _check_named_pools(name, model, self.pools)
        ids: dict[str, str] = {}
        for pool_name, pool in self.pools.items():
            for replica in pool.replicas:
                if replica.id in ids:
                    raise ValueError(
                        f"pools.{pool_name}: replica id {replica.id!r} already used in "
                        f"pools.{ids[replica.id]}"
                    )
                ids[replica.id] = pool_name
        for name, model in self.models.items():
            for slo in model.slos:
                if slo.tenant is not None and slo.tenant not in {*self.tenants, ANONYMOUS}:
                    raise ValueError(
                        f"models.{name}.slos.{slo.name}: unknown tenant {slo.tenant!r} "
                        f"(have {', '.join(sorted({*self.tenants, ANONYMOUS}))})"
                    )
        return self


def _check_named_pools(name: str, model: ModelConfig, pools: dict[str, PoolConfig]) -> None:
    """The pools a model's audits and burn-policy vote name exist."""
    named = [("vote_pools", pool) for pool in model.vote_pools]
    if model.audit is not None and model.audit.against is not None:
        named.append(("audit.against", model.audit.against))
    for key, pool_ref in named:
        if pool_ref not in pools:
            known = ", ".join(sorted(pools))
            raise ValueError(f"models.{name}.{key}: unknown pool {pool_ref!r} (have {known})")

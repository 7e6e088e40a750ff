"""The configuration schema: nested, frozen pydantic models, one per concept.

Config is validated once at load time (never with ``assert``) so a typo fails `check-config`
with the bad key named, instead of failing a request at 3 a.m.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.upstream.transport import Endpoint

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ServerConfig(Frozen):
    """Where the gateway listens and how it talks upstream."""

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    transport: Literal["fast", "aiohttp", "httpx", "httpx-aiohttp"] = "fast"
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0)
    max_connections_per_replica: int = Field(256, gt=0)


class LocalLaunch(Frozen):
    """How `gateway up` starts this pool's replicas on this machine (``replica serve``)."""

    model_path: str
    device: Literal["cpu", "cuda"] = "cpu"
    enable_faults: bool = False
    startup_timeout_s: float = Field(60.0, gt=0)


class HealthCheckConfig(Frozen):
    """Active readiness probes, one loop per replica (Envoy's health_checks, simplified)."""

    interval_s: float = Field(0.5, gt=0, le=60)
    jitter: float = Field(0.2, ge=0, le=1)
    timeout_s: float = Field(0.5, gt=0)
    healthy_threshold: int = Field(2, ge=1)
    unhealthy_threshold: int = Field(2, ge=1)


class OutlierConfig(Frozen):
    """Passive outlier ejection from live traffic (Envoy's consecutive_5xx, simplified)."""

    consecutive_failures: int = Field(5, ge=1)
    base_ejection_s: float = Field(2.0, gt=0, description="first ejection; grows linearly")
    max_ejection_s: float = Field(30.0, gt=0)
    max_ejection_percent: int = Field(50, ge=0, le=100)


class BreakerConfig(Frozen):
    """Per-replica circuit breaker (pybreaker under an adapter with an injected clock)."""

    failure_threshold: int = Field(5, ge=1, description="consecutive failures that open it")
    reset_timeout_s: float = Field(2.0, gt=0, description="open -> half-open after this")
    success_threshold: int = Field(2, ge=1, description="half-open passes that close it")
    half_open_max_calls: int = Field(1, ge=1, description="concurrent probes while half-open")


class ReplicaConfig(Frozen):
    id: str = Field(pattern=ID_PATTERN)
    url: str
    zone: str | None = None
    standby: bool = Field(False, description="hot spare: used only while actives are down")

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, value: str) -> str:
        Endpoint.parse(value)
        return value.rstrip("/")

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint.parse(self.url)


class PoolConfig(Frozen):
    """Replicas that serve one upstream model name/version."""

    model: str = Field(min_length=1, description="model name on the replicas")
    version: str | None = Field(None, description="model version on the replicas")
    replicas: tuple[ReplicaConfig, ...] = Field(min_length=1)
    health: HealthCheckConfig = HealthCheckConfig()
    outlier: OutlierConfig = OutlierConfig()
    breaker: BreakerConfig = BreakerConfig()
    panic_threshold_percent: int = Field(
        50, ge=0, le=100, description="below this share of usable replicas, use all of them"
    )
    local: LocalLaunch | None = None

    @field_validator("replicas")
    @classmethod
    def _unique_ids(cls, replicas: tuple[ReplicaConfig, ...]) -> tuple[ReplicaConfig, ...]:
        seen: set[str] = set()
        for replica in replicas:
            if replica.id in seen:
                raise ValueError(f"duplicate replica id {replica.id!r}")
            seen.add(replica.id)
        return replicas


class TryTimeoutConfig(Frozen):
    """Per-try timeout learned from the pool's observed latency, when a retry is still possible.

    ``multiplier × quantile`` of recent successful attempts, within [min_ms, time left]; the
    last possible attempt always gets all the time left. A hung replica then costs one short
    try instead of the whole deadline.
    """

    adaptive: bool = True
    quantile: float = Field(0.99, gt=0, lt=1)
    multiplier: float = Field(4.0, ge=1)
    min_ms: float = Field(25.0, gt=0)
    min_samples: int = Field(20, ge=1)
    cold_ms: float = Field(250.0, gt=0, description="per-try timeout before min_samples")


class RetryConfig(Frozen):
    """Bounded retries with exponential backoff and full jitter, each on an untried replica."""

    max_attempts: int = Field(3, ge=1, description="attempts in all, the first included")
    backoff_base_ms: float = Field(25.0, ge=0)
    backoff_max_ms: float = Field(250.0, ge=0)
    try_timeout: TryTimeoutConfig = TryTimeoutConfig()


class RetryBudgetConfig(Frozen):
    """Gateway-wide cap on retries: ``ratio`` of requests plus ``min_per_s`` (Finagle/Linkerd)."""

    ratio: float = Field(0.2, ge=0)
    min_per_s: float = Field(10.0, ge=0)
    window_s: float = Field(10.0, gt=0)


class AdmissionConfig(Frozen):
    """Bound on in-flight requests per model; beyond it requests are shed at once."""

    max_in_flight: int = Field(256, ge=1)
    retry_after_s: float = Field(1.0, gt=0)


class HedgeConfig(Frozen):
    """Tail-latency hedging: one more copy after the pool's observed latency quantile."""

    enabled: bool = False
    quantile: float = Field(0.95, gt=0, lt=1)
    min_delay_ms: float = Field(5.0, ge=0)
    min_samples: int = Field(50, ge=1)


class ModelConfig(Frozen):
    """A model as clients see it, the pool that serves it, and its request policy."""

    pool: str
    version: str = "1"
    timeout_ms: int = Field(1000, gt=0, description="deadline when the client sends none")
    max_timeout_ms: int = Field(60_000, gt=0, description="cap on x-request-timeout-ms")
    retry: RetryConfig = RetryConfig()
    admission: AdmissionConfig = AdmissionConfig()
    hedge: HedgeConfig = HedgeConfig()

    @model_validator(mode="after")
    def _timeouts(self) -> ModelConfig:
        if self.timeout_ms > self.max_timeout_ms:
            raise ValueError("timeout_ms must not exceed max_timeout_ms")
        return self


class GatewayConfig(Frozen):
    server: ServerConfig = ServerConfig()
    retry_budget: RetryBudgetConfig = RetryBudgetConfig()
    pools: dict[str, PoolConfig] = Field(min_length=1)
    models: dict[str, ModelConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> GatewayConfig:
        for name, model in self.models.items():
            if model.pool not in self.pools:
                known = ", ".join(sorted(self.pools))
                raise ValueError(f"models.{name}.pool: unknown pool {model.pool!r} (have {known})")
        ids: dict[str, str] = {}
        for pool_name, pool in self.pools.items():
            for replica in pool.replicas:
                if replica.id in ids:
                    raise ValueError(
                        f"pools.{pool_name}: replica id {replica.id!r} already used in "
                        f"pools.{ids[replica.id]}"
                    )
                ids[replica.id] = pool_name
        return self

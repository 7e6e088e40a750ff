"""A pool (``pools.<name>``): the replicas that serve one upstream model name/version, listed or
discovered, how the gateway reaches them (TLS, extra headers, tensor names) and the policies that
watch them (health probes, outlier ejection, breaker, golden probes, accelerator, load).

Apart from the whole config because the replica registry, the eligibility check, the conformance
probes and the launcher each take one pool's config, not the document.
"""

from __future__ import annotations

import os

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.accelerator import AcceleratorConfig
from gateway.config.discovery import DiscoveryConfig
from gateway.config.endpoint import Endpoint
from gateway.config.headers import ExtraHeaders, check_headers, missing_variables
from gateway.config.load import LoadConfig
from gateway.config.policies import (
    BreakerConfig,
    GoldenProbeConfig,
    HealthCheckConfig,
    OutlierConfig,
)
from gateway.config.replica import LocalLaunch, ReplicaConfig
from gateway.config.tensors import TensorMapping
from gateway.config.tls import TlsConfig
from gateway.frozen import Frozen


class PoolConfig(Frozen):
    """Replicas that serve one upstream model name/version."""

    model: str = Field(min_length=1, description="model name on the replicas")
    version: str | None = Field(None, description="model version on the replicas")
    replicas: tuple[ReplicaConfig, ...] = Field(
        (), description="the replicas, listed (exactly one of replicas and discovery)"
    )
    discovery: DiscoveryConfig | None = Field(
        None, description="the replicas from DNS, re-resolved periodically (instead of replicas)"
    )
    health: HealthCheckConfig = Field(
        HealthCheckConfig(), description="active health probes of every replica"
    )
    outlier: OutlierConfig = Field(
        OutlierConfig(), description="passive ejection of replicas that fail live requests"
    )
    breaker: BreakerConfig = Field(BreakerConfig(), description="one circuit breaker per replica")
    golden: GoldenProbeConfig | None = Field(
        None, description="correctness probes with known inputs; none: no golden probes"
    )
    accelerator: AcceleratorConfig | None = Field(
        None,
        description="accelerator health sampled from each replica (or dcgm-exporter); the "
        "accelerator rules drain a replica before its GPU fails; none: no sampling",
    )
    panic_threshold_percent: int = Field(
        50, ge=0, le=100, description="below this share of usable replicas, use all of them"
    )
    load_aware: bool = Field(
        True,
        description="balance by the load replicas report (their queue, in answers or on "
        "/metrics) plus this gateway's outstanding requests, and shed sheddable requests while "
        "every replica is saturated; it applies wherever a replica reports (elsewhere, and "
        "without a fresh reading, the balancer picks as without it); false: reports are not "
        "read and nothing is scraped",
    )
    load: LoadConfig = Field(
        default_factory=LoadConfig,
        description="how reported load is read (scrape interval, staleness, saturation)",
    )
    local: LocalLaunch | None = Field(
        None, description="how `gateway up` starts these replicas here; none: they run elsewhere"
    )
    tensors: TensorMapping = Field(
        default_factory=TensorMapping, description="the replicas' tensor names and shapes"
    )
    binary_tensors: bool | None = Field(
        None,
        description="the replicas take the binary tensor extension (true) or not (false: JSON "
        "is sent); default: learned from their server metadata's extensions at start and "
        "on reload, JSON until then",
    )
    echoes_id: bool = Field(
        True,
        description="the replicas return each request's V2 id (as the protocol says); a reply "
        "without it is refused. false: id-less replies are taken, and every exchange gets a "
        "connection of its own (Connection: close), so no late answer can reach another request",
    )
    tls: TlsConfig | None = Field(
        None, description="for https:// and grpcs:// replicas: CA, client cert, SNI"
    )
    headers: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="sent to every replica on every request (Host, Authorization...); "
        "${VAR} takes a value from the environment; values are never shown",
    )

    @field_validator("replicas")
    @classmethod
    def _unique_ids(cls, replicas: tuple[ReplicaConfig, ...]) -> tuple[ReplicaConfig, ...]:
        seen: set[str] = set()
        for replica in replicas:
            if replica.id in seen:
                raise ValueError(f"duplicate replica id {replica.id!r}")
            seen.add(replica.id)
        return replicas

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, SecretStr]) -> dict[str, SecretStr]:
        return check_headers(headers)

    @model_validator(mode="after")
    def _transport(self) -> PoolConfig:
        if (self.discovery is None) == (not self.replicas):
            raise ValueError("a pool has either replicas or discovery (exactly one of them)")
        if self.discovery is not None and self.local is not None:
            raise ValueError("local: `gateway up` starts listed replicas, not discovered ones")
        plain = [r.id for r in self.replicas if r.endpoint.tls is None]
        if self.tls is not None and plain:
            raise ValueError(
                f"tls is set but replicas {', '.join(plain)} are not https:// or grpcs://"
            )
        if (
            self.tls is not None
            and not self.tls.verify
            and any(r.endpoint.is_grpc for r in self.replicas)
        ):
            raise ValueError("tls.verify: false is not possible for grpcs:// replicas")
        if self.local is not None and len(plain) < len(self.replicas):
            raise ValueError(
                "local replicas serve plain http or grpc: their urls must be http:// or grpc://"
            )
        missing = missing_variables(self.headers, os.environ)
        if missing:
            raise ValueError(f"headers: environment variables not set: {', '.join(missing)}")
        # a value from ${VAR} holding CR/LF is refused at load: check-config and serve agree
        ExtraHeaders.resolve(self.headers, os.environ)
        return self

    def endpoint(self, replica: ReplicaConfig) -> Endpoint:
        """Where ``replica`` listens, with this pool's TLS settings and extra headers; its
        connections are kept alive only if its replies can be matched to requests by id."""
        extra = ExtraHeaders.resolve(self.headers, os.environ)
        return replica.endpoint.with_pool(self.tls, extra, keep_alive=self.echoes_id)

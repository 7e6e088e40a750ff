"""The configuration schema: nested, frozen pydantic models, one per concept.

Config is validated once at load time (never with ``assert``) so a typo fails `check-config`
with the bad key named, instead of failing a request at 3 a.m.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.access import AdminAccessConfig, normalise_hosts
from gateway.config.discovery import DiscoveryConfig
from gateway.config.endpoint import Endpoint
from gateway.config.frozen import Frozen
from gateway.config.headers import ExtraHeaders, check_headers, missing_variables
from gateway.config.policies import (
    AdmissionConfig,
    BreakerConfig,
    FallbackConfig,
    GoldenProbeConfig,
    HealthCheckConfig,
    HedgeConfig,
    OutlierConfig,
    RetryBudgetConfig,
    RetryConfig,
    VoteConfig,
)
from gateway.config.rollout import RolloutConfig
from gateway.config.state import StateConfig
from gateway.config.tenants import ANONYMOUS, ModelAuthConfig, TenantConfig, check_tenants
from gateway.config.tensors import TensorMapping
from gateway.config.tls import TlsConfig
from gateway.slo.config import BurnPolicyConfig, SloConfig, unique_names
from gateway.telemetry.tracing import TracingConfig
from v2proto.signature import DATATYPES

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"

# The largest real request: DEFAULT_MAX_ROWS rows of the digits model's 64 FP32 features as
# JSON, at no more than 25 bytes a number (", -1.2345678901234567e-05") and 4 a row, is
# 1.57 MiB (256 KiB as binary tensors); the body limit adds ~28 % for headroom. 1,024 rows
# take a replica ~13 ms, inside the shortest learned per-try timeout (20 ms), so the largest
# request is not retried onto a second replica just for being large (4,096 rows took 42-62 ms).
DEFAULT_MAX_ROWS = 1024
# Real payloads: an image classifier's request is 1x3x224x224 FP32, 602 KB as binary tensor data
# and ~1.2 MB as JSON; a batch of 10 is 6 MB binary, ~12 MB JSON. 16 MiB admits that batch in
# either encoding (and the largest digits request, above, many times over); the memory bound
# across requests is ``inflight_bytes``, not this cap.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_REPLY_BODY_BYTES = 16 * 1024 * 1024  # the same batch's answer, even as JSON
# Where parsing and checking a V2 body on the event loop passes ~1 ms on a 2-core machine:
# 64 KiB of the slowest kind (short numbers in nested rows, ~70 MB/s with the checks; orjson
# alone passes 1 ms at ~200 KiB of those and ~600 KiB of long random floats).
DEFAULT_PARSE_INLINE_MAX_BYTES = 64 * 1024
DEFAULT_PARSE_FAST_INLINE_MAX_BYTES = 2 * 1024 * 1024  # ≈ 2 ms on the loop, at most


class ServerConfig(Frozen):
    """Where the gateway listens, what it accepts from clients, and how it talks upstream.

    The client limits keep one big or slow client from hurting the others: a request body
    over ``max_body_bytes`` gets 413, a request line and headers over ``max_header_bytes``
    get 431, headers not complete ``header_timeout_s`` after the connection (or the request's
    first byte) get 408 and a closed connection, and so does a body not complete
    ``body_timeout_s`` after its headers. Bodies over ``parse_inline_max_bytes`` are parsed
    off the event loop, in ``parse_workers`` worker processes (``parse_offload``), except JSON
    bodies up to ``parse_fast_inline_max_bytes`` that the fast path checks (flat float data).
    A replica's reply over the ``max_reply_*`` caps is a failed attempt of that replica (it
    is untrusted).
    """

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    grpc_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="the V2 gRPC service's port, on `host` (Triton's 8001); unset: `gateway up` "
        "serves gRPC on 8001, `gateway serve` serves none (--grpc-port sets it for either)",
    )
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, gt=0)
    max_header_bytes: int = Field(32 * 1024, ge=1024, description="request line + headers")
    header_timeout_s: float = Field(10.0, gt=0)
    body_timeout_s: float = Field(30.0, gt=0)
    parse_inline_max_bytes: int = Field(DEFAULT_PARSE_INLINE_MAX_BYTES, ge=0)
    parse_fast_inline_max_bytes: int = Field(
        DEFAULT_PARSE_FAST_INLINE_MAX_BYTES,
        ge=0,
        description="JSON bodies of flat float lists up to this size are checked on the event "
        "loop by the fast path (~1 ms per MB); larger ones go to the parse offload",
    )
    parse_offload: Literal["process", "thread", "inline"] = Field(
        "process", description="thread: no help with orjson, which holds the GIL (measured)"
    )
    parse_workers: int = Field(1, ge=1, le=64)
    max_connections_per_replica: int = Field(256, gt=0)
    max_reply_body_bytes: int = Field(
        DEFAULT_MAX_REPLY_BODY_BYTES,
        gt=0,
        description="a replica's reply body; over it: a failed attempt",
    )
    inflight_bytes: int | None = Field(
        None,
        gt=0,
        description="request and answer bytes held at once, gateway-wide; a request whose "
        "declared body does not fit waits up to inflight_wait_s, then gets 503 + Retry-After; "
        "default: 1/16 of the machine's (or container's) memory, from 64 MiB to 1 GiB",
    )
    inflight_wait_s: float = Field(0.5, ge=0)
    max_reply_header_bytes: int = Field(64 * 1024, gt=0)
    max_reply_headers: int = Field(100, gt=0)
    admin: AdminAccessConfig = AdminAccessConfig()
    allowed_hosts: tuple[str, ...] | None = Field(
        None,
        description="Host names the control plane answers under (port ignored; '*': any); "
        "default: 127.0.0.1, localhost, [::1] and `host` unless it is a wildcard",
    )
    drain_s: float = Field(
        5.0,
        ge=0,
        description="on SIGTERM/SIGINT: readiness 503 at once, requests still served this "
        "long (endpoints propagate), then new connections refused and in-flight ones finished",
    )
    watch_config: bool = Field(
        False, description="reload when the config file's modification time changes (polled)"
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if hosts is None else normalise_hosts(hosts)


class LocalLaunch(Frozen):
    """How `gateway up` starts this pool's replicas on this machine (``replica serve``)."""

    model_path: str
    device: Literal["cpu", "cuda"] = "cpu"
    enable_faults: bool = Field(
        False,
        description="replicas get --enable-faults; /admin/faults then takes the key in "
        "$REPLICA_FAULT_KEY, or else a new key per run, in a file whose path is logged",
    )
    startup_timeout_s: float = Field(60.0, gt=0)


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
    replicas: tuple[ReplicaConfig, ...] = ()
    discovery: DiscoveryConfig | None = Field(
        None, description="the replicas from DNS, re-resolved periodically (instead of replicas)"
    )
    health: HealthCheckConfig = HealthCheckConfig()
    outlier: OutlierConfig = OutlierConfig()
    breaker: BreakerConfig = BreakerConfig()
    golden: GoldenProbeConfig | None = None
    panic_threshold_percent: int = Field(
        50, ge=0, le=100, description="below this share of usable replicas, use all of them"
    )
    local: LocalLaunch | None = None
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


class LogConfig(Frozen):
    json_lines: bool = Field(True, description="one JSON object per log line")
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class TensorDecl(Frozen):
    name: str = Field(min_length=1)
    datatype: str = Field(description="a V2 datatype: FP32, INT64, BYTES, ...")
    shape: tuple[int, ...] = Field(description="-1 for a dimension of any size")

    @field_validator("datatype")
    @classmethod
    def _v2_datatype(cls, datatype: str) -> str:
        if datatype not in DATATYPES:
            raise ValueError(f"datatype {datatype!r} is not a V2 datatype ({', '.join(DATATYPES)})")
        return datatype

    def metadata(self) -> dict[str, object]:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


class SignatureConfig(Frozen):
    """The model's tensors in the clients' names, for servers whose metadata lists none."""

    inputs: tuple[TensorDecl, ...] = Field(min_length=1)
    outputs: tuple[TensorDecl, ...] = ()

    def metadata(self) -> dict[str, list[dict[str, object]]]:
        return {
            "inputs": [t.metadata() for t in self.inputs],
            "outputs": [t.metadata() for t in self.outputs],
        }


class ModelConfig(Frozen):
    """A model as clients see it: one pool or a vote over pools, and its request policy."""

    pool: str | None = None
    vote: VoteConfig | None = None
    fallback: FallbackConfig | None = None
    version: str = "1"
    timeout_ms: int = Field(1000, gt=0, description="deadline when the client sends none")
    max_timeout_ms: int = Field(60_000, gt=0, description="cap on x-request-timeout-ms")
    max_rows: int = Field(DEFAULT_MAX_ROWS, gt=0, description="rows (first dimension) a request")
    retry: RetryConfig = RetryConfig()
    admission: AdmissionConfig = AdmissionConfig()
    hedge: HedgeConfig = HedgeConfig()
    slos: tuple[SloConfig, ...] = ()
    burn_policy: BurnPolicyConfig = BurnPolicyConfig()
    required: bool = Field(
        True, description="the gateway's /v2/health/ready waits for this model to be ready"
    )
    signature: SignatureConfig | None = Field(
        None, description="requests are checked against it; default: the replicas' metadata"
    )
    auth: ModelAuthConfig = ModelAuthConfig()
    rollout: RolloutConfig | None = Field(
        None, description="a candidate pool tried beside `pool` (shadow or canary)"
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
        return self

    @property
    def pools(self) -> tuple[str, ...]:
        """Every pool this model routes to."""
        return self.vote.pools if self.vote is not None else (self.pool or "",)

    @property
    def route(self) -> str:
        return "vote" if self.vote is not None else "single"


class GatewayConfig(Frozen):
    server: ServerConfig = ServerConfig()
    retry_budget: RetryBudgetConfig = RetryBudgetConfig()
    fallback_manifest: str | None = Field(
        None, description="default: the manifest shipped in the package (gateway.fallback)"
    )
    state: StateConfig = StateConfig()
    tracing: TracingConfig = TracingConfig()
    log: LogConfig = LogConfig()
    pools: dict[str, PoolConfig] = Field(min_length=1)
    models: dict[str, ModelConfig] = Field(min_length=1)
    tenants: dict[str, TenantConfig] = Field(
        default_factory=dict, description="API keys to tenants, and their limits"
    )

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
                raise ValueError(f"models.{name}.rollout.candidate: unknown pool "
                                 f"{model.rollout.candidate!r} (have {known})")  # fmt: skip
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

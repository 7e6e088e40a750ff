"""The configuration schema: nested, frozen pydantic models, one per concept.

Config is validated once at load time (never with ``assert``) so a typo fails `check-config`
with the bad key named, instead of failing a request at 3 a.m.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.accelerator import AcceleratorConfig
from gateway.config.access import AdminAccessConfig, normalise_hosts
from gateway.config.audit import AuditConfig
from gateway.config.discovery import DiscoveryConfig
from gateway.config.endpoint import Endpoint
from gateway.config.grpc_door import GrpcDoorConfig
from gateway.config.headers import ExtraHeaders, check_headers, missing_variables
from gateway.config.load import LoadConfig
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

# re-exported
from gateway.config.replica import LocalLaunch as LocalLaunch
from gateway.config.replica import ReplicaConfig as ReplicaConfig
from gateway.config.rollout import RolloutConfig
from gateway.config.signature import SignatureConfig
from gateway.config.state import StateConfig
from gateway.config.tenants import ANONYMOUS, ModelAuthConfig, TenantConfig, check_tenants
from gateway.config.tensors import TensorMapping
from gateway.config.tls import TlsConfig
from gateway.config.upstream import UpstreamConfig, moved_to_upstream
from gateway.config.workers import Workers, check_workers
from gateway.frozen import Frozen
from gateway.slo.config import BurnPolicyConfig, SloConfig, unique_names
from gateway.telemetry.tracing import TracingConfig

log = logging.getLogger(__name__)

# The largest digits request a replica answers inside the shortest learned per-try timeout, so
# it is not retried onto a second replica just for being large.
DEFAULT_MAX_ROWS = 1024
# Admits a batch of ten 224x224 FP32 images in either encoding (binary or JSON), and its answer;
# the memory bound across requests is ``inflight_bytes``, not this cap (docs/performance.md).
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
# Where parsing a V2 body on the event loop would stall it for other requests: past this size it
# goes to the parse offload (loadtests/bench_payloads.py measures both sides of the line).
DEFAULT_PARSE_INLINE_MAX_BYTES = 64 * 1024
DEFAULT_PARSE_FAST_INLINE_MAX_BYTES = 2 * 1024 * 1024


# server.<old> -> server.<new>: read, with a warning, for one release
RENAMED_IN_SERVER = {"parse_workers": "parse_processes"}


def renamed_in_server(server: dict[str, Any]) -> dict[str, Any]:
    """An older config's renamed ``server:`` keys under their new names, each with a WARNING;
    a setting given under both its names is an error."""
    if not RENAMED_IN_SERVER.keys() & server.keys():
        return server
    server = dict(server)
    for old, new in RENAMED_IN_SERVER.items():
        if old not in server:
            continue
        if new in server:
            raise ValueError(f"server.{old} and server.{new} are one setting: keep server.{new}")
        log.warning("server.%s is deprecated: it is server.%s now", old, new)
        server[new] = server.pop(old)
    return server


class ServerConfig(Frozen):
    """Where the gateway listens, what it accepts from clients, and its control plane.

    The client limits keep one big or slow client from hurting the others; what the gateway
    accepts from replicas is the ``upstream`` section's (`UpstreamConfig`).
    """

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        return renamed_in_server(data) if isinstance(data, dict) else data

    host: str = Field(
        "127.0.0.1",
        description="the address REST (and gRPC) listen on; not loopback: an admin key is required",
    )
    port: int = Field(
        8000, ge=0, le=65535, description="the REST and /metrics port (0: any free port)"
    )
    grpc_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="the V2 gRPC service's port, on `host` (Triton's 8001); unset: `gateway up` "
        "serves gRPC on 8001, `gateway serve` serves none (--grpc-port sets it for either)",
    )
    grpc: GrpcDoorConfig = Field(
        GrpcDoorConfig(),
        description="the gRPC door's HTTP/2 limits (streams, windows, keepalive, idle "
        "connections); its messages count against inflight_bytes and body_timeout_s as "
        "REST bodies do",
    )
    workers: Workers = Field(
        1,
        description="data-plane worker processes beside the control process, each serving the "
        "REST and gRPC ports; auto: the CPUs this process may use (its CPU affinity, capped by "
        "its cgroup's CPU quota); `--workers` overrides it; a change needs a restart",
    )
    standby_worker: bool = Field(
        True,
        description="keep one worker process started ahead, its imports done, so a worker that "
        "dies serves again within 2 s; false: one process fewer, and a dead worker's "
        "replacement starts cold (its imports take a second or more); a change needs a restart",
    )
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, gt=0, description="over it: 413")
    max_connections: int | None = Field(
        None,
        ge=1,
        description="client connections each door (REST, gRPC) holds at once; one more is "
        "refused at once (closed). Default: from the file-descriptor limit (raised to the hard "
        "limit at start), less 128 for the process and what the pools may open to their "
        "replicas (at most half the rest), split between the two doors, from 16 to 16384 "
        "(gateway.config.connections)",
    )
    max_connections_per_peer: int | None = Field(
        256,
        ge=1,
        description="client connections one address holds at once on each door of each worker "
        "process (REST: one more is answered 503 and closed; gRPC: a call on one more "
        "connection is answered RESOURCE_EXHAUSTED). Each worker enforces the whole value, "
        "not a share of it: the kernel spreads one client's connections unevenly across the "
        "workers, so a share would refuse a client below the value; the most one address "
        "holds is then this many per worker. An IPv6 client counts by its full address; "
        "null: no cap",
    )
    max_header_bytes: int = Field(32 * 1024, ge=1024, description="request line + headers: 431")
    header_timeout_s: float = Field(
        10.0, gt=0, description="headers incomplete this long after connect: 408, closed"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="a body not complete this long after its headers: 408 and close"
    )
    parse_inline_max_bytes: int = Field(
        DEFAULT_PARSE_INLINE_MAX_BYTES, ge=0, description="bigger bodies: parsed off the loop"
    )
    parse_fast_inline_max_bytes: int = Field(
        DEFAULT_PARSE_FAST_INLINE_MAX_BYTES,
        ge=0,
        description="JSON bodies of flat float lists up to this size are checked on the event "
        "loop by the fast path; larger ones go to the parse offload",
    )
    parse_offload: Literal["process", "thread", "inline"] = Field(
        "process",
        description="where large bodies are parsed: parse processes, a thread (no help: orjson "
        "holds the GIL) or the event loop itself",
    )
    parse_processes: int = Field(
        1,
        ge=1,
        le=64,
        description="parse processes (or threads) of the parse offload; was parse_workers, "
        "still read (with a warning) for one release",
    )
    inflight_bytes: int | None = Field(
        None,
        gt=0,
        description="request and answer bytes held at once, gateway-wide; a body holds what "
        "has arrived plus one read (256 KiB), never what it declared, and a hold that does not "
        "fit waits up to inflight_wait_s, then gets 503 + Retry-After; default: 1/16 of the "
        "machine's (or container's) memory, from 64 MiB to 1 GiB",
    )
    inflight_wait_s: float = Field(
        0.5,
        ge=0,
        description="how long a body, or a replica's answer about to be read, that does not "
        "fit inflight_bytes waits, then 503",
    )
    inflight_small_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="a request holding at most this much (body and answer) is small: it may "
        "use the part of inflight_bytes kept for small requests",
    )
    inflight_small_reserve: float = Field(
        0.125,
        ge=0,
        lt=1,
        description="the share of inflight_bytes that larger requests never hold, so that "
        "small ones find room however many large ones are in flight",
    )
    inflight_peer_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="the most of inflight_bytes one client address holds in large requests "
        "while another address waits (at least two max_body_bytes); gRPC reads lent room "
        "past it are taken back for the one waiting",
    )
    admin: AdminAccessConfig = Field(
        AdminAccessConfig(), description="the control plane's keys (admin, operators, /metrics)"
    )
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

    @field_validator("workers", mode="before")
    @classmethod
    def _workers(cls, workers: object) -> object:
        return check_workers(workers)


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

"""The ``server:`` section: where the gateway listens, what it accepts from clients (the limits
that keep one big or slow client from hurting the others) and its control plane.

Apart from the whole config because the doors and the in-flight byte budget
(`gateway.memory.inflight_bytes`) read these settings alone. It holds the defaults of its
limits and the keys older configs had under other names (read, with a warning, for one release).
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.access import AdminAccessConfig, normalise_hosts
from gateway.config.grpc_door import GrpcDoorConfig
from gateway.config.workers import Workers, check_workers
from gateway.frozen import Frozen

log = logging.getLogger(__name__)

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

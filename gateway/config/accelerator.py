"""A pool's ``accelerator:`` section: sample its replicas' GPU health and drain before failure.

Absent (the default), nothing is sampled and nothing runs for the pool. Present, the gateway
reads each replica's accelerator every ``idle_interval_s`` while its readings are far from
every limit, and every ``interval_s`` once one comes within a margin of a rule's threshold
(`gateway.accelerator.need`), from the replica's own ``/metrics``
or, for a replica named in ``exporters``, from a dcgm-exporter (per node) with the UUID of
the replica's GPU, and judges the readings by the accelerator rules
(`gateway.accelerator.rules`), with the thresholds below where the device does not report
its own.

A page is read with a cap in bytes (``max_page_bytes``: the read stops past it) and in series
(``max_page_series``), and parsed off the event loop: a replica or an exporter is an untrusted
peer, and its page must never hold the requests' loop.
"""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from gateway.config.endpoint import Endpoint
from gateway.frozen import Frozen

DEFAULT_METRICS_PATH = "/metrics"
# Room for a node exporter's page (every GPU of a node, MIG instances, Kubernetes labels; see
# docs/hardware.md), not for a flood.
DEFAULT_MAX_PAGE_BYTES = 1024 * 1024
DEFAULT_MAX_PAGE_SERIES = 10_000


class ExporterTarget(Frozen):
    """Where one replica's GPU is read instead of its own /metrics: a dcgm-exporter."""

    url: str = Field(description="the exporter's base URL, e.g. http://node-1:9400")
    uuid: str = Field(
        pattern=r"^GPU-", description="the UUID label of the replica's GPU in the exporter"
    )
    path: str = Field(DEFAULT_METRICS_PATH, description="the exporter's metrics path")

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        if Endpoint.parse(value).is_grpc:
            raise ValueError("an exporter is read over http:// or https://")
        return value.rstrip("/")


class AcceleratorLimits(Frozen):
    """Thresholds of the accelerator rules (the device's own slowdown/shutdown win when known)."""

    slowdown_c: float | None = Field(
        None, gt=0, description="slowdown temperature when the device reports none (°C)"
    )
    shutdown_c: float | None = Field(
        None, gt=0, description="shutdown temperature when the device reports none (°C)"
    )
    sbe_per_minute: float = Field(
        60.0, gt=0, description="correctable (single-bit) ECC errors per minute that drain early"
    )
    throttled_weight: float = Field(
        0.25,
        gt=0,
        le=1,
        description="balancer weight of a replica whose GPU is thermally or power throttled",
    )


class AcceleratorConfig(Frozen):
    """Sampling of the pool's accelerators and when the accelerator rules act."""

    interval_s: float = Field(
        0.5,
        ge=0.1,
        le=1.0,
        description="seconds between samples of a replica whose readings are near a limit "
        "(1-10 Hz)",
    )
    idle_interval_s: float = Field(
        1.0,
        ge=0.1,
        le=10.0,
        description="seconds between samples of a replica whose readings are all far from "
        "their limits (at least interval_s)",
    )
    margin_c: float = Field(
        10.0,
        ge=0,
        description="a temperature within this of slowdown, or whose trend reaches it within "
        "lead_s, is near: sampled every interval_s",
    )
    margin_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="correctable ECC errors per minute over this share of "
        "limits.sbe_per_minute are near: sampled every interval_s",
    )
    timeout_s: float | None = Field(
        None, gt=0, description="one sample's time limit; default: the interval"
    )
    jitter: float = Field(
        0.1, ge=0, le=0.5, description="each pause varies by up to this share, at random"
    )
    max_concurrent: int = Field(
        16, ge=1, le=1024, description="samples of this pool in flight at once, at most"
    )
    lead_s: float = Field(
        10.0,
        ge=0,
        description="drain early when the temperature is predicted to reach slowdown this soon",
    )
    fit_s: float = Field(
        3.0, gt=0, description="seconds of recent samples the temperature trend is fitted to"
    )
    healthy_for_s: float = Field(
        30.0, ge=0, description="good samples for this long before a drained replica returns"
    )
    max_page_bytes: int = Field(
        DEFAULT_MAX_PAGE_BYTES,
        ge=4096,
        le=64 * 1024 * 1024,
        description="a metrics page's body, at most; over: the read stops and the page is "
        "refused (the sample counts as refused, the reading as unknown)",
    )
    max_page_series: int = Field(
        DEFAULT_MAX_PAGE_SERIES,
        ge=16,
        le=1_000_000,
        description="sample lines (series) on a metrics page, at most; over: refused",
    )
    exporters: dict[str, ExporterTarget] = Field(
        default_factory=dict,
        description="replica id -> the dcgm-exporter and GPU UUID to read it from; replicas "
        "not named here are read from their own /metrics",
    )
    limits: AcceleratorLimits = Field(default_factory=AcceleratorLimits, description="thresholds")

    @model_validator(mode="after")
    def _timeout(self) -> AcceleratorConfig:
        if self.timeout_s is not None and self.timeout_s > self.interval_s * 3:
            raise ValueError("timeout_s: at most 3 intervals (a reading is stale after that)")
        if self.idle_interval_s < self.interval_s:
            raise ValueError("idle_interval_s: at least interval_s")
        return self

    @property
    def sample_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else self.interval_s

    @property
    def stale_after_s(self) -> float:
        """A reading older than this is unknown, never healthy (3 of the longer intervals)."""
        return 3 * max(self.interval_s, self.idle_interval_s)

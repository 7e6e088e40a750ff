"""A pool's ``load:`` section: how the load its replicas report is read and when it is old.

Replicas say how loaded they are: on every answer (``endpoint-load-metrics``, ORCA's text
form, `v2proto.load`) and on ``/metrics`` (their queue under their server's names:
`gateway.upstream.probes.load_names`). With the pool's ``load_aware`` on (the default), the
gateway reads the reports its answers carry, and the control process scrapes a replica that
sent none for ``interval_s`` (an idle one, or a server that sends no report); the balancer
weighs replicas by what they report, and a pool whose every eligible replica reports a queue
over ``saturated_queue`` sheds sheddable requests at once (`gateway.pipeline.saturation`).
A reading older than ``stale_s`` is ignored: never taken for an empty queue.

A scraped page is read with a cap in bytes (``max_page_bytes``: the read stops past it) and
in series (``max_page_series``), and parsed off the event loop, as accelerator pages are.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from gateway.frozen import Frozen

# a model server's whole /metrics page, with room
DEFAULT_MAX_PAGE_BYTES = 1024 * 1024
DEFAULT_MAX_PAGE_SERIES = 10_000


class LoadConfig(Frozen):
    """Reading what a pool's replicas report of their load."""

    interval_s: float = Field(
        0.25,
        ge=0.05,
        le=10.0,
        description="a replica that sent no load report on an answer for this long is scraped "
        "(its /metrics), once per interval",
    )
    stale_s: float = Field(
        2.0,
        gt=0,
        le=60.0,
        description="a reading older than this is ignored (the balancer picks as if none "
        "came), never taken as an empty queue",
    )
    saturated_queue: float = Field(
        5.0,
        ge=0,
        description="a replica reporting a queue over this is saturated; while every eligible "
        "replica of the pool is, requests of sheddable priority (below 0) are shed at once",
    )
    metrics_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="scrape this port of the replica's host (MLServer serves metrics on a port "
        "of its own, 8082 by default); default: the replica's own port",
    )
    metrics_path: str = Field(
        "/metrics", pattern=r"^/", description="the path of the replicas' Prometheus page"
    )
    timeout_s: float | None = Field(
        None, gt=0, description="one scrape's time limit; default: the interval, at least 0.1 s"
    )
    max_page_bytes: int = Field(
        DEFAULT_MAX_PAGE_BYTES,
        ge=4096,
        le=64 * 1024 * 1024,
        description="a metrics page's body, at most; over: the read stops, the page is refused",
    )
    max_page_series: int = Field(
        DEFAULT_MAX_PAGE_SERIES,
        ge=16,
        le=1_000_000,
        description="sample lines (series) on a metrics page, at most; over: refused",
    )

    @model_validator(mode="after")
    def _fresh(self) -> LoadConfig:
        if self.stale_s < self.interval_s:
            raise ValueError("stale_s: at least interval_s (else every scrape is stale)")
        return self

    @property
    def scrape_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else max(self.interval_s, 0.1)

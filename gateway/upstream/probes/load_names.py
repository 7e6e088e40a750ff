"""What each model server calls its load on ``/metrics``, as data: `LOAD_METRICS`.

Servers report load in their own words. Triton (and our replica, under Triton's name) has a
gauge of requests waiting; MLServer observes its queues into histograms as requests arrive
(``batch_request_queue`` before its adaptive batcher, ``parallel_request_queue`` before its
parallel workers); KServe's model server times each predict (``request_predict_seconds``)
and keeps no queue. Each row names a family, who exposes it, what it measures (``queue``:
requests waiting; ``inflight``: received and not answered) and how a value is made of it:

- ``gauge``: the sum of its samples now;
- ``mean``: a histogram of sizes seen by arriving requests; the mean of those observed since
  the previous scrape (the change of ``_sum`` over the change of ``_count``; none arrived:
  nothing waited, 0);
- ``busy``: a histogram of durations; its ``_sum``'s growth per second since the previous
  scrape, which is the mean number of requests in it over that time (Little's law).

The page's families of the pool's model only, where a series names its model (``model``,
Triton's and ours; ``model_name``, MLServer's and KServe's). A replica's reading is the sum
of its ``queue`` rows, or, where it reports none, of its ``inflight`` rows. The table in
``docs/load.md`` is checked against this one (`tests/docs`), and each row against a real
server of its kind (`tests/peers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from v2proto.load import INFLIGHT_METRIC, PENDING_METRIC

Role = Literal["queue", "inflight"]
Kind = Literal["gauge", "mean", "busy"]
MODEL_LABELS = ("model", "model_name")


@dataclass(frozen=True, slots=True)
class LoadMetric:
    # the family's name on the page
    name: str
    # who exposes it, in words
    server: str
    role: Role
    kind: Kind


LOAD_METRICS: tuple[LoadMetric, ...] = (
    LoadMetric(PENDING_METRIC, "Triton; this project's replica", "queue", "gauge"),
    LoadMetric(INFLIGHT_METRIC, "this project's replica", "inflight", "gauge"),
    LoadMetric("batch_request_queue", "MLServer, adaptive batching on", "queue", "mean"),
    LoadMetric("parallel_request_queue", "MLServer, parallel workers on", "queue", "mean"),
    LoadMetric("request_predict_seconds", "KServe (Python model server)", "inflight", "busy"),
)
BY_NAME = {m.name: m for m in LOAD_METRICS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
# the scrape asks for these families only, where the server honours ``name[]`` (ours, any
# prometheus_client page); others send the whole page, read within its caps
QUERY = "&".join(f"name[]={name}" for name in NAMES)

"""A scraped ``/metrics`` page read into a replica's load: bounded, off the loop, as data.

A replica's page comes from an untrusted peer, up to 20 times a second per replica: it is
read with a cap in bytes (the scraper's transport), refused over a cap in series before
anything is decoded (`gateway.upstream.probes.accelerator_pages.refusal`), and only the
lines of the families in `LOAD_METRICS` (at most `MAX_LOAD_LINES`) are parsed, by
prometheus_client's parser, in a worker thread (`read_load_page` does no I/O and reads no
clock). What it returns are totals (`PageTotals`); `LoadTracker` makes the reading of them on
the loop, where the previous scrape's totals are (the ``mean`` and ``busy`` kinds are changes
since then).

A value no server reports (negative, NaN, an infinity, over `MAX_VALUE`) refuses the page
whole: its reading is unknown, never partly believed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from gateway.policies.load_report import MAX_QUEUE, LoadReport
from gateway.upstream.probes.accelerator_pages import PageCaps, refusal
from gateway.upstream.probes.load_names import BY_NAME, MODEL_LABELS, NAMES

# a reading's source: the replica's page
SCRAPE = "scrape"
# lines of the load families on one page: a few per model served
MAX_LOAD_LINES = 1024
# a sum of sizes or of seconds since a server started, at most
MAX_VALUE = 1e15
_SUFFIXES = ("_sum", "_count")


@dataclass(frozen=True, slots=True)
class PageTotals:
    """A page's load families (by name): a gauge's sum of samples, a histogram's ``(_sum,
    _count)``; ``refused``: why the page was not read (its load unknown)."""

    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, tuple[float, float]] = field(default_factory=dict)
    refused: str | None = None

    @property
    def empty(self) -> bool:
        """The page shows none of the families: the server reports no load we read."""
        return not self.gauges and not self.histograms


def load_lines(page: bytes) -> list[str]:
    """The lines of ``page`` that may carry a load family (by their name's start)."""
    lines = page.decode("utf-8", "replace").splitlines()
    return [line for line in lines if line.startswith(NAMES)]


def read_load_page(page: bytes, caps: PageCaps, model: str) -> PageTotals:
    """The load families of ``page`` for ``model`` (series naming another model are left
    out); refused whole over a cap or with a value no server reports."""
    why = refusal(page, caps)
    if why is not None:
        return PageTotals(refused=why)
    lines = load_lines(page)
    if len(lines) > MAX_LOAD_LINES:
        return PageTotals(refused=f"{len(lines)} lines of load families, over {MAX_LOAD_LINES}")
    try:
        samples = [
            (s.name, s.labels, float(s.value))
            for family in text_string_to_metric_families("\n".join(lines) + "\n")
            for s in family.samples
        ]
    except ValueError as exc:
        return PageTotals(refused=f"malformed: {exc}"[:200])
    gauges: dict[str, float] = {}
    sums: dict[str, list[float]] = {}
    for name, labels, value in samples:
        if any(labels.get(label, model) != model for label in MODEL_LABELS):
            continue
        if not math.isfinite(value) or not 0 <= value <= MAX_VALUE:
            return PageTotals(refused=f"{name}: {value} is not a load")
        if name in BY_NAME:
            if BY_NAME[name].kind == "gauge":
                gauges[name] = gauges.get(name, 0.0) + value
            continue
        base, suffix = name[:-4], name[-4:]
        if suffix != "_sum":
            base, suffix = name[:-6], name[-6:]
        metric = BY_NAME.get(base)
        if metric is None or metric.kind == "gauge" or suffix not in _SUFFIXES:
            continue
        pair = sums.setdefault(base, [0.0, 0.0])
        pair[suffix == "_count"] += value
    histograms = {name: (pair[0], pair[1]) for name, pair in sums.items()}
    return PageTotals(gauges, histograms)


class LoadTracker:
    """One replica's scrapes made readings: the totals of its previous page are kept, as the
    ``mean`` and ``busy`` kinds read a change since then."""

    def __init__(self) -> None:
        # the last page read (the same bytes again: the same totals)
        self.page = b""
        self.totals: PageTotals | None = None
        self._previous: tuple[float, PageTotals] | None = None

    def reading(self, now: float, totals: PageTotals) -> LoadReport | None:
        """The replica's load by ``totals`` read at ``now``; None: not known yet (a change
        needs a previous page) or a counter went back (the server restarted)."""
        previous, self._previous = self._previous, (now, totals)
        queue: float | None = None
        inflight: float | None = None
        for name, value in totals.gauges.items():
            if BY_NAME[name].role == "queue":
                queue = (queue or 0.0) + value
            else:
                inflight = (inflight or 0.0) + value
        for name, (total, count) in totals.histograms.items():
            metric = BY_NAME[name]
            if previous is None or name not in previous[1].histograms:
                return None
            then, before = previous[0], previous[1].histograms[name]
            grown, arrived = total - before[0], count - before[1]
            if grown < 0 or arrived < 0 or now <= then:
                return None
            if metric.kind == "mean":
                value = grown / arrived if arrived else 0.0
            else:
                value = grown / (now - then)
            if metric.role == "queue":
                queue = (queue or 0.0) + value
            else:
                inflight = (inflight or 0.0) + value
        pending = queue if queue is not None else inflight
        if pending is None:
            return None
        return LoadReport(min(pending, MAX_QUEUE), inflight, source=SCRAPE)

"""Lock-free metric families (counter, gauge, histogram) collected into a Prometheus registry.

prometheus_client takes a lock on every ``inc``/``observe``; the gateway records from one
event-loop thread, so these cells are plain attributes, several times cheaper
(loadtests/bench_telemetry.py), and prometheus_client only formats them
at scrape time. Trade-off, stated plainly: record from the loop thread only; a scrape from
another thread may see a histogram's sum and buckets one observation apart.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

Labels = tuple[str, ...]


class Value:
    """One counter or gauge series: a number the hot path adds to."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


# a batch of more values is sorted once (`Buckets.observe_all`)
_SORT_FROM = 8


class Buckets:
    """One histogram series: per-bucket counts (the last one is +Inf) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # The first bound >= value: Prometheus buckets count observations "less or equal".
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_all(self, values: Sequence[float]) -> None:
        """Each of ``values``, counted as `observe` counts it; the sum adds them in order.

        Many values are sorted once and each bucket takes its share with one search, so a
        batch costs about as much as its bucket count, not as its length.
        """
        counts, bounds = self.counts, self.bounds
        if len(values) <= _SORT_FROM:
            for value in values:
                counts[bisect_left(bounds, value)] += 1
        else:
            ordered = sorted(values)
            below = 0
            for index, bound in enumerate(bounds):
                # bucket i: bounds[i-1] < value <= bounds[i]
                upto = bisect_right(ordered, bound, below)
                counts[index] += upto - below
                below = upto
            counts[-1] += len(ordered) - below
        self.sum = sum(values, self.sum)

    @property
    def count(self) -> int:
        return sum(self.counts)


S = TypeVar("S", Value, Buckets)


class _Family(Generic[S]):
    """Named series keyed by label values; ``labels()`` is the cache the hot path reads."""

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], new: Callable[[], S]
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._new: Callable[[], S] = new
        self._series: dict[Labels, S] = {}

    def labels(self, *values: str) -> S:
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
            series = self._series[values] = self._new()
        return series

    def remove(self, *values: str) -> None:
        self._series.pop(values, None)

    def clear(self) -> None:
        self._series.clear()

    def items(self) -> list[tuple[Labels, S]]:
        return list(self._series.items())


class CounterFamily(_Family[Value]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labelnames, Value)

    def collect(self) -> Metric:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in self.items():
            family.add_metric(labels, series.value)
        return family


class GaugeFamily(_Family[Value]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(name, documentation, labelnames, Value)

    def collect(self) -> Metric:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in self.items():
            family.add_metric(labels, series.value)
        return family


class HistogramFamily(_Family[Buckets]):
    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], bounds: Iterable[float]
    ) -> None:
        self.bounds = tuple(sorted(float(b) for b in bounds))
        if not self.bounds or self.bounds[-1] == float("inf"):
            raise ValueError("histogram bounds must be finite and non-empty (+Inf is implied)")
        # as prometheus_client writes le
        self._le = [repr(b) for b in self.bounds] + ["+Inf"]
        # Whole-number bounds (bytes, rows) compare as ints: an int observed against float
        # bounds costs bisect a conversion per comparison.
        bounds_: tuple[float, ...] = self.bounds
        if all(b.is_integer() for b in bounds_):
            bounds_ = tuple(int(b) for b in bounds_)
        super().__init__(name, documentation, labelnames, lambda: Buckets(bounds_))

    def collect(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, series in self.items():
            cumulative: list[tuple[str, float]] = []
            total = 0
            for le, count in zip(self._le, series.counts, strict=True):
                total += count
                cumulative.append((le, float(total)))
            family.add_metric(labels, cumulative, series.sum)
        return family


Family = CounterFamily | GaugeFamily | HistogramFamily


class FamilyCollector(Collector):
    """Hands a fixed set of families to a `CollectorRegistry`, running hooks before each scrape.

    Hooks copy state that is cheaper to read at scrape time than to track per request (the
    admission layer's in-flight counts, ejections that end by time, the SLO document).
    """

    def __init__(self, families: Sequence[Family], hooks: list[Callable[[], None]]) -> None:
        self._families = tuple(families)
        self._hooks = hooks

    def collect(self) -> Iterator[Metric]:
        for hook in self._hooks:
            try:
                hook()
            except Exception:
                # a broken hook must not break the whole scrape
                log.warning("metrics scrape hook %r failed", hook, exc_info=True)
        for family in self._families:
            yield family.collect()

    def describe(self) -> Iterator[Metric]:
        # names are fixed in code and checked by the tests
        return iter(())

"""Reported load's Prometheus series, built at scrape time from the replicas' readings.

Each replica's reported queue (fresh readings only) and the age of its reading, each pool's
saturation, the scrapes by result, and the answers' load reports taken and refused (by why);
labelled by the configured pools and their replicas (bounded). Nothing is recorded per
request or per scrape: a collector reads the state when Prometheus scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.clock import Clock
from gateway.upstream.probes.load import LoadScraper
from gateway.upstream.saturation import saturation


class LoadCollector(Collector):
    def __init__(
        self, scraper: LoadScraper, clock: Clock, reports: Callable[[], Mapping[str, int]]
    ) -> None:
        """``reports``: the answers' load reports so far, ``taken`` and refused by why."""
        self._scraper = scraper
        self._clock = clock
        self._reports = reports

    def collect(self) -> Iterator[Metric]:
        now = self._clock.now()
        queue = GaugeMetricFamily(
            "gateway_replica_reported_queue",
            "The queue a replica last reported (in an answer or on /metrics), while fresh.",
            labels=["pool", "replica"],
        )
        age = GaugeMetricFamily(
            "gateway_replica_reported_age_seconds",
            "Seconds since a replica's load was last read (older than load.stale_s: ignored).",
            labels=["pool", "replica"],
        )
        saturated = GaugeMetricFamily(
            "gateway_pool_saturated",
            "1 while every eligible replica of the pool reports a queue over its threshold.",
            labels=["pool"],
        )
        for name, pool in self._scraper.pools.items():
            stale_s = pool.config.load.stale_s
            for replica in pool.replicas:
                if replica.load is None:
                    continue
                age.add_metric([name, replica.id], max(0.0, now - replica.load_at))
                if replica.fresh_load(now, stale_s) is not None:
                    queue.add_metric([name, replica.id], replica.reported_queue)
            saturated.add_metric([name], 0.0 if saturation(pool, now) is None else 1.0)
        scrapes = CounterMetricFamily(
            "gateway_load_scrapes",
            "Scrapes of replicas' /metrics for their load, by result: ok, skipped (an answer "
            "reported it within the interval), silent (no load series), refused, error.",
            labels=["pool", "result"],
        )
        for (pool_name, result), count in sorted(self._scraper.scrapes.items()):
            scrapes.add_metric([pool_name, result], count)
        reports = CounterMetricFamily(
            "gateway_load_reports",
            "Load reports answers carried: taken, or refused (too_long, too_many_names, "
            "not_text_form, malformed, absurd, no_queue) and ignored.",
            labels=["result"],
        )
        for result, count in sorted(self._reports().items()):
            reports.add_metric([result], count)
        yield from (queue, age, saturated, scrapes, reports)

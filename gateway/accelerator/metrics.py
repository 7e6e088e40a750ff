"""The accelerator sampler's Prometheus series, built at scrape time from its state.

Readings, staleness, weight, accelerator drains in force and counted, samples read, failed or
refused (over a page cap), values left out as impossible, and exceptions a loop caught;
labelled by the configured pools, their replicas and the DCGM fields only (bounded). A
collector reads the sampler's dictionaries when Prometheus scrapes, so sampling itself records
nothing per sample.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.accelerator.sampler import AcceleratorSampler
from v2proto.dcgm import FIELDS


class AcceleratorCollector(Collector):
    def __init__(self, sampler: AcceleratorSampler) -> None:
        self._sampler = sampler

    def collect(self) -> Iterator[Metric]:
        sampler = self._sampler
        now = sampler.now()
        reading = GaugeMetricFamily(
            "gateway_accelerator_reading",
            "A replica's accelerator reading, by DCGM field name (fresh readings only).",
            labels=["pool", "replica", "field"],
        )
        stale = GaugeMetricFamily(
            "gateway_accelerator_stale",
            "1 when a replica's accelerator reading is older than 3 intervals or missing.",
            labels=["pool", "replica"],
        )
        weight = GaugeMetricFamily(
            "gateway_accelerator_weight",
            "A replica's balancer weight (below 1 while its GPU is throttled).",
            labels=["pool", "replica"],
        )
        drained = GaugeMetricFamily(
            "gateway_hardware_drained",
            "1 while the accelerator rules hold a replica drained, by the signal that drained it.",
            labels=["pool", "replica", "signal"],
        )
        for name, pool in sampler.pools.items():
            for replica in (*pool.replicas, *pool.draining):
                state = sampler.states.get(replica.id)
                if state is None:
                    continue
                is_stale = state.stale(now)
                stale.add_metric([name, replica.id], 1.0 if is_stale else 0.0)
                weight.add_metric([name, replica.id], replica.weight)
                last = state.reading
                if last is not None and not is_stale:
                    for field in FIELDS:
                        value = last.value(field)
                        if value is not None:
                            reading.add_metric([name, replica.id, field.name], value)
                if state.drained is not None:
                    drained.add_metric([name, replica.id, state.drained.signal], 1.0)
        drains = CounterMetricFamily(
            "gateway_hardware_drains",
            "Drains the accelerator rules decided, by replica and signal.",
            labels=["pool", "replica", "signal"],
        )
        for (pool_name, replica_id, signal), count in sorted(sampler.drains.items()):
            drains.add_metric([pool_name, replica_id, signal], count)
        samples = CounterMetricFamily(
            "gateway_accelerator_samples",
            "Accelerator samples taken, by pool and result: ok, error (no page) or refused "
            "(a page over max_page_bytes or max_page_series).",
            labels=["pool", "result"],
        )
        for (pool_name, result), count in sorted(sampler.samples.items()):
            samples.add_metric([pool_name, result], count)
        bad = CounterMetricFamily(
            "gateway_accelerator_bad_values",
            "Accelerator values left out as no device can read them (NaN, infinite, out of "
            "range), by replica and DCGM field.",
            labels=["pool", "replica", "field"],
        )
        for (pool_name, replica_id, field_name), count in sorted(sampler.bad_values.items()):
            bad.add_metric([pool_name, replica_id, field_name], count)
        errors = CounterMetricFamily(
            "gateway_accelerator_sampler_errors",
            "Exceptions a sampling loop caught and skipped (logged, at most once a minute).",
            labels=["pool"],
        )
        for pool_name, count in sorted(sampler.errors.items()):
            errors.add_metric([pool_name], count)
        yield from (reading, stale, weight, drained, drains, samples, bad, errors)

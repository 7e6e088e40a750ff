"""The replica's accelerator as ``/metrics`` reports it: the device's last sample, readings a
chaos test injected over it, or that there is no accelerator at all.

A gateway drains a replica whose GPU is about to fail only if the replica says how its GPU is;
it says so under dcgm-exporter's names (`v2proto.dcgm`), so the gateway reads a replica and a
dcgm-exporter the same way. The NVML sampler thread (`replicas.accelerator_nvml`) writes
``sampled``; the fault endpoint sets ``injected`` (`replicas.accelerator_inject`); a scrape
reads both, off the request path. Without a device and without injected readings nothing is
made up: ``replica_accelerator_present{source="none"}`` is 0 (the reason is logged at start)
and no DCGM series is exported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from replicas.accelerator_inject import InjectedReadings
from v2proto.dcgm import FIELDS, GPU_LABEL, UUID_LABEL, Reading

PRESENT = "replica_accelerator_present"


class Accelerator:
    """The device's readings now: ``sampled`` (from NVML) overlaid by ``injected``."""

    def __init__(self, absent: str | None, clock: Callable[[], float] = time.monotonic) -> None:
        self.absent = absent  # why there is no device to sample (None: there is one)
        self.sampled: Reading | None = None  # one assignment per sample: read whole, never torn
        self.injected: InjectedReadings | None = None
        self._clock = clock

    @property
    def source(self) -> str:
        if self.injected is not None:
            return "injected"
        return "nvml" if self.sampled is not None else "none"

    def current(self) -> Reading | None:
        """What ``/metrics`` shows now; None: no accelerator (nothing made up)."""
        injected = self.injected
        if injected is not None:
            return injected.apply(self.sampled, self._clock())
        return self.sampled

    def inject(self, update: object) -> InjectedReadings | None:
        """Readings injected over the device's (``None`` clears them); the current ones
        updated, so a later injection keeps what an earlier one set. Validated first."""
        if update is None:
            return None
        base = self.injected or InjectedReadings()
        return base.merged(update, self._clock())

    def set_injected(self, injected: InjectedReadings | None) -> None:
        self.injected = injected

    def injected_json(self) -> dict[str, object] | None:
        injected = self.injected
        return None if injected is None else injected.to_json(self._clock())


class AcceleratorCollector(Collector):
    """Exposes `Accelerator.current` at scrape time, under dcgm-exporter's names."""

    def __init__(self, accelerator: Accelerator) -> None:
        self._accelerator = accelerator

    def collect(self) -> Iterator[Metric]:
        reading = self._accelerator.current()
        present = GaugeMetricFamily(
            PRESENT,
            "1 when the replica reports an accelerator (sampled through NVML, or injected); "
            "0: it has none, and no DCGM series is exported.",
            labels=["source"],
        )
        present.add_metric([self._accelerator.source], 0.0 if reading is None else 1.0)
        yield present
        if reading is None:
            return
        labels = [GPU_LABEL, UUID_LABEL]
        for field in FIELDS:
            value = reading.value(field)
            if value is None:
                continue
            # as gauges, counters included: the DCGM name is kept as it is (a counter family
            # would get a second ``_total``); readers go by the sample's name
            family = GaugeMetricFamily(field.name, field.help, labels=labels)
            family.add_metric([reading.gpu, reading.uuid], value)
            yield family

    def describe(self) -> Iterator[Metric]:
        """Every name it may export (a scrape may ask for some by name: ``?name[]=``)."""
        yield GaugeMetricFamily(PRESENT, "")
        for field in FIELDS:
            yield GaugeMetricFamily(field.name, field.help)

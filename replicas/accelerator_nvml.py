"""The replica's GPU read through NVML (``nvidia-ml-py``, the ``gpu`` extra), in a thread.

NVML calls are synchronous C calls, so they never run on the event loop: `NvmlSampler` is a
daemon thread that reads the device every ``interval_s`` and hands the whole `Reading` to the
`Accelerator` in one assignment. ``pynvml`` is imported only by `open_device`, so a replica
without the extra never imports it; without a driver or a device `open_device` returns why
(NVML's own words, e.g. "NVML Shared Library Not Found"), and the replica reports no
accelerator. A field the device does not support (NVML's NotSupported) is left out, not
guessed. XID errors come from NVML's event set (critical XID events), read without waiting.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from replicas.accelerator import Accelerator
from v2proto.dcgm import Reading

log = logging.getLogger("replicas.accelerator")
MIB = 1024 * 1024
DEFAULT_INTERVAL_S = 0.5  # 2 Hz
MIN_INTERVAL_S = 0.1  # 10 Hz
MAX_INTERVAL_S = 10.0


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlDevice:
    """One GPU, opened through ``nvml`` (the ``pynvml`` module, passed in)."""

    def __init__(self, nvml: ModuleType, index: int) -> None:
        self._nvml = nvml
        self._handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.gpu = str(index)
        self.uuid = _text(nvml.nvmlDeviceGetUUID(self._handle))
        self.slowdown_c = self._optional(
            nvml.nvmlDeviceGetTemperatureThreshold, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        )
        self.shutdown_c = self._optional(
            nvml.nvmlDeviceGetTemperatureThreshold, nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN
        )
        self._events: Any = None
        self._xid: float | None = None
        try:
            events = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(self._handle, nvml.nvmlEventTypeXidCriticalError, events)
            self._events, self._xid = events, 0.0
        except nvml.NVMLError as exc:
            log.info("gpu %s: no XID events (%s)", self.gpu, exc)

    def _optional(self, call: Callable[..., Any], *args: Any) -> float | None:
        """``call(handle, *args)`` as a float; None where the device does not say."""
        try:
            return float(call(self._handle, *args))
        except self._nvml.NVMLError:
            return None

    def _last_xid(self) -> float | None:
        """The last critical XID seen (0: none yet); None without an event set."""
        nvml = self._nvml
        while self._events is not None:
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:  # NVML_ERROR_TIMEOUT: no event waiting
                break
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                self._xid = float(data.eventData)
        return self._xid

    def read(self) -> Reading:
        nvml, handle = self._nvml, self._handle
        power_mw = self._optional(nvml.nvmlDeviceGetPowerUsage)
        sbe = self._optional(
            nvml.nvmlDeviceGetTotalEccErrors,
            nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        dbe = self._optional(
            nvml.nvmlDeviceGetTotalEccErrors,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        throttle = self._optional(reasons or nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        pending = failure = None
        try:
            _, _, is_pending, failed = nvml.nvmlDeviceGetRemappedRows(handle)
            pending, failure = float(bool(is_pending)), float(bool(failed))
        except nvml.NVMLError:
            pass
        used = free = None
        try:
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            used, free = memory.used / MIB, memory.free / MIB
        except nvml.NVMLError:
            pass
        return Reading(
            self.gpu, self.uuid,
            temperature_c=self._optional(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
            power_w=None if power_mw is None else power_mw / 1000.0,
            ecc_sbe_total=sbe, ecc_dbe_total=dbe, xid=self._last_xid(),
            row_remap_pending=pending, row_remap_failure=failure, throttle_reasons=throttle,
            fb_used_mib=used, fb_free_mib=free,
            slowdown_c=self.slowdown_c, shutdown_c=self.shutdown_c,
        )  # fmt: skip

    def close(self) -> None:
        nvml = self._nvml
        try:
            if self._events is not None:
                nvml.nvmlEventSetFree(self._events)
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.info("gpu %s: NVML shutdown: %s", self.gpu, exc)


def open_device(index: int) -> NvmlDevice | str:
    """The GPU ``index`` through NVML, or why there is none to read."""
    try:
        import pynvml
    except ModuleNotFoundError:
        return "nvidia-ml-py is not installed (the 'gpu' extra)"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML: {exc}"
    try:
        return NvmlDevice(pynvml, index)
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        return f"NVML: gpu {index}: {exc}"


class NvmlSampler:
    """Reads ``device`` into ``accelerator.sampled`` every ``interval_s``, in a daemon thread."""

    def __init__(self, device: NvmlDevice, accelerator: Accelerator, interval_s: float) -> None:
        self._device = device
        self._accelerator = accelerator
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)

    def start(self) -> None:
        self._sample()  # the first reading before the first scrape
        self._thread.start()

    def _sample(self) -> None:
        try:
            self._accelerator.sampled = self._device.read()
        except Exception:  # a driver hiccup must not end sampling for good
            log.exception("gpu %s: NVML read failed", self._device.gpu)
            self._accelerator.sampled = None

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2 * self._interval_s + 1.0)
        self._device.close()


def start_accelerator(
    index: int | None, interval_s: float
) -> tuple[Accelerator, NvmlSampler | None]:
    """The replica's accelerator: sampled through NVML from GPU ``index`` when there is one
    (None: sampling off), else one that reports none (and says why, in the log)."""
    if index is None:
        return Accelerator("accelerator sampling is off (--accelerator off)"), None
    device = open_device(index)
    if isinstance(device, str):
        log.info("no accelerator: %s", device)
        return Accelerator(device), None
    accelerator = Accelerator(None)
    sampler = NvmlSampler(device, accelerator, interval_s)
    sampler.start()
    log.info("accelerator: gpu %s (%s) sampled every %.2f s", device.gpu, device.uuid, interval_s)
    return accelerator, sampler

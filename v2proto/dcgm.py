"""The accelerator readings a replica exposes and a gateway samples, under dcgm-exporter's names.

Replicas report their GPU on ``/metrics`` and the gateway reads either that or a
dcgm-exporter endpoint; both sides name a reading by its `Field`, so one table says what each
DCGM field means here. Names, types and units follow NVIDIA's DCGM field list
(``dcgm_fields.h``) and dcgm-exporter's counters file; every series carries the labels
``gpu`` (the device index) and ``UUID`` (the device's own id), as dcgm-exporter's do.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_LABEL = "gpu"
UUID_LABEL = "UUID"


@dataclass(frozen=True, slots=True)
class Field:
    """One reading: its attribute name here, its DCGM metric name, type and help text."""

    attr: str
    name: str
    kind: str  # "gauge" or "counter", as dcgm-exporter declares it
    help: str


FIELDS: tuple[Field, ...] = (
    Field("temperature_c", "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    Field("power_w", "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    Field("ecc_sbe_total", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter",
          "Total number of single-bit volatile ECC errors."),
    Field("ecc_dbe_total", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter",
          "Total number of double-bit volatile ECC errors."),
    Field("xid", "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    Field("row_remap_pending", "DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge",
          "Whether remapping of rows is pending."),
    Field("row_remap_failure", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge",
          "Whether remapping of rows has failed."),
    Field("throttle_reasons", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge",
          "Current clock throttle reasons (a bit mask of NVML's nvmlClocksThrottleReason*)."),
    Field("fb_used_mib", "DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    Field("fb_free_mib", "DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    Field("slowdown_c", "DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "GPU slowdown temperature (in C)."),
    Field("shutdown_c", "DCGM_FI_DEV_SHUTDOWN_TEMP", "gauge", "GPU shutdown temperature (in C)."),
)  # fmt: skip
BY_NAME = {f.name: f for f in FIELDS}
NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)

# Bits of DCGM_FI_DEV_CLOCK_THROTTLE_REASONS (NVML's nvmlClocksThrottleReason* values).
THROTTLE_SW_POWER_CAP = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40
THROTTLE_HW_POWER_BRAKE = 0x80
THERMAL_THROTTLE = THROTTLE_SW_THERMAL | THROTTLE_HW_THERMAL | THROTTLE_HW_SLOWDOWN
POWER_THROTTLE = THROTTLE_SW_POWER_CAP | THROTTLE_HW_POWER_BRAKE


@dataclass(frozen=True, slots=True)
class Reading:
    """One device's readings at one moment; None: the device does not report that field."""

    gpu: str
    uuid: str
    temperature_c: float | None = None
    power_w: float | None = None
    ecc_sbe_total: float | None = None
    ecc_dbe_total: float | None = None
    xid: float | None = None
    row_remap_pending: float | None = None
    row_remap_failure: float | None = None
    throttle_reasons: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    slowdown_c: float | None = None
    shutdown_c: float | None = None

    def value(self, field: Field) -> float | None:
        value: float | None = getattr(self, field.attr)
        return value

    def to_json(self) -> dict[str, float | str | None]:
        doc: dict[str, float | str | None] = {"gpu": self.gpu, "uuid": self.uuid}
        doc.update({f.attr: self.value(f) for f in FIELDS})
        return doc

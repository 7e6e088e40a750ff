"""Accelerator readings injected for chaos tests: fixed values, and a temperature ramp.

``POST /admin/faults`` with ``{"accelerator": {...}}`` sets readings that replace what NVML
would say (field by field: what is not injected still comes from the device, if there is one);
a replica without a GPU then reports an injected device. ``temperature_ramp`` ({from, to,
over_s}) makes the temperature climb linearly from the moment it is injected, so a scenario
can watch a gateway predict the slowdown before it is reached. Values are validated here, so
a bad one is the fault endpoint's 400 and changes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from replicas.errors import BadRequest
from v2proto.dcgm import Reading

INJECTED_GPU = "0"
INJECTED_UUID = "GPU-00000000-0000-0000-0000-000000000000"
# An injected device that names no thresholds of its own gets these (a data-centre GPU's order
# of magnitude), so that a temperature alone is enough to inject.
INJECTED_SLOWDOWN_C = 90.0
INJECTED_SHUTDOWN_C = 95.0
RANGES: dict[str, tuple[float, float]] = {
    "temperature_c": (-50.0, 200.0),
    "power_w": (0.0, 10_000.0),
    "ecc_sbe_total": (0.0, 1e15),
    "ecc_dbe_total": (0.0, 1e15),
    "xid": (0.0, 1e6),
    "row_remap_pending": (0.0, 1.0),
    "row_remap_failure": (0.0, 1.0),
    "throttle_reasons": (0.0, float(2**64 - 1)),
    "fb_used_mib": (0.0, 1e9),
    "fb_free_mib": (0.0, 1e9),
    "slowdown_c": (0.0, 200.0),
    "shutdown_c": (0.0, 200.0),
}
RAMP = "temperature_ramp"
MAX_RAMP_S = 86_400.0


@dataclass(frozen=True, slots=True)
class Ramp:
    """The temperature from ``start_c`` to ``end_c`` over ``over_s`` from ``began``; then
    it stays at ``end_c``."""

    start_c: float
    end_c: float
    over_s: float
    began: float

    def at(self, now: float) -> float:
        share = 1.0 if self.over_s <= 0 else min(1.0, max(0.0, (now - self.began) / self.over_s))
        return self.start_c + (self.end_c - self.start_c) * share

    def to_json(self) -> dict[str, float]:
        return {"from": self.start_c, "to": self.end_c, "over_s": self.over_s}


@dataclass(frozen=True, slots=True)
class InjectedReadings:
    values: dict[str, float] = field(default_factory=dict)
    ramp: Ramp | None = None
    uuid: str | None = None

    def merged(self, update: object, now: float) -> InjectedReadings:
        """These readings with ``update`` applied; a fixed temperature ends a ramp and a new
        ramp replaces a fixed temperature. `BadRequest` names the first bad key."""
        if not isinstance(update, dict):
            raise BadRequest("'accelerator' must be a JSON object of readings, or null")
        values, ramp, uuid = dict(self.values), self.ramp, self.uuid
        for key, value in update.items():
            if key in RANGES:
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = _number(f"accelerator.{key}", value, *RANGES[key])
                if key == "temperature_c":
                    ramp = None
            elif key == RAMP:
                ramp = None if value is None else _ramp(value, now)
                values.pop("temperature_c", None)
            elif key == "uuid":
                if not isinstance(value, str) or not value.startswith("GPU-"):
                    raise BadRequest("'accelerator.uuid' must be a string starting 'GPU-'")
                uuid = value
            else:
                known = ", ".join([*RANGES, RAMP, "uuid"])
                raise BadRequest(f"unknown accelerator reading '{key}'; known: {known}")
        return InjectedReadings(values, ramp, uuid)

    def apply(self, base: Reading | None, now: float) -> Reading:
        """``base`` (the device's sample; None: no device) with these readings over it."""
        if base is None:
            base = Reading(INJECTED_GPU, INJECTED_UUID, slowdown_c=INJECTED_SLOWDOWN_C,
                           shutdown_c=INJECTED_SHUTDOWN_C)  # fmt: skip
        changes: dict[str, Any] = dict(self.values)
        if self.ramp is not None:
            changes["temperature_c"] = round(self.ramp.at(now), 3)
        if self.uuid is not None:
            changes["uuid"] = self.uuid
        return replace(base, **changes)

    def to_json(self, now: float) -> dict[str, object]:
        doc: dict[str, object] = dict(self.values)
        if self.ramp is not None:
            doc[RAMP] = {**self.ramp.to_json(), "now_c": round(self.ramp.at(now), 3)}
        if self.uuid is not None:
            doc["uuid"] = self.uuid
        return doc


def _number(key: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequest(f"'{key}' must be a number, got {value!r}")
    if not low <= value <= high:
        raise BadRequest(f"'{key}' must be between {low:g} and {high:g}, got {value!r}")
    return float(value)


def _ramp(value: object, now: float) -> Ramp:
    if not isinstance(value, dict) or set(value) != {"from", "to", "over_s"}:
        raise BadRequest(f"'accelerator.{RAMP}' must be an object with from, to and over_s")
    low, high = RANGES["temperature_c"]
    start = _number(f"accelerator.{RAMP}.from", value["from"], low, high)
    end = _number(f"accelerator.{RAMP}.to", value["to"], low, high)
    over = _number(f"accelerator.{RAMP}.over_s", value["over_s"], 0.0, MAX_RAMP_S)
    return Ramp(start, end, over, now)

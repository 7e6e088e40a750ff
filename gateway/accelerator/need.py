"""How soon an accelerator needs its next reading: far from every limit, or near one.

Sampling every replica at 10 Hz costs a GET and a parse each, whether or not anything is
happening; a GPU far from every limit does not need it. So a replica is sampled at the
pool's ``accelerator.idle_interval_s`` (1 Hz by default) while `near` finds nothing, and at
``accelerator.interval_s`` (up to 10 Hz) once a reading comes within a margin of a rule's
threshold, as data (`NEAR`):

- the temperature within ``margin_c`` of slowdown, or its least-squares trend reaching
  ``slowdown − margin_c`` within ``lead_s`` (the trend rule drains at slowdown within
  ``lead_s``: this starts the fast readings a margin before);
- correctable ECC errors per minute over ``margin_share`` of ``sbe_per_minute``;
- any reading a rule acts on at once (uncorrectable ECC, a critical XID, rows to remap,
  throttling): fast while it lasts, so its end is seen soon.

Nothing here does I/O or reads a clock; the readings it sees were vetted
(`gateway.policies.accelerator_values`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.accelerator.rules import RULES, Window, trend

Near = Callable[[Window, "Margins"], str | None]


@dataclass(frozen=True, slots=True)
class Margins:
    # °C below slowdown that count as near it
    margin_c: float
    # of the SBE-rate limit that counts as near it
    margin_share: float


def _temperature(w: Window, m: Margins) -> str | None:
    temp, slowdown = w.last.temperature_c, w.slowdown_c()
    if temp is None or slowdown is None:
        return None
    edge = slowdown - m.margin_c
    if temp >= edge:
        return f"temperature {temp:g} °C within {m.margin_c:g} °C of slowdown"
    points = [
        (s.at, s.reading.temperature_c) for s in w.samples if s.reading.temperature_c is not None
    ]
    fit = trend(points)
    if fit is None:
        return None
    now_c, slope = fit
    if slope > 0 and (edge - now_c) / slope <= w.lead_s:
        return f"temperature rising {slope:.2f} °C/s towards slowdown"
    return None


def _sbe_rate(w: Window, m: Margins) -> str | None:
    counts = [
        (s.at, s.reading.ecc_sbe_total) for s in w.samples if s.reading.ecc_sbe_total is not None
    ]
    if len(counts) < 2 or counts[-1][0] <= counts[0][0]:
        return None
    per_minute = max(0.0, counts[-1][1] - counts[0][1]) / (counts[-1][0] - counts[0][0]) * 60
    if per_minute <= m.margin_share * w.limits.sbe_per_minute:
        return None
    return f"correctable ECC errors {per_minute:.0f}/min"


def _acting(w: Window, m: Margins) -> str | None:
    """A rule that acts on the reading itself (not a trend or a rate) matches it now."""
    for rule in RULES:
        if rule.signal in ("ecc_dbe", "xid", "row_remap", "throttle"):
            evidence = rule.check(w)
            if evidence is not None:
                return evidence.text
    return None


NEAR: tuple[Near, ...] = (_temperature, _sbe_rate, _acting)


def near(window: Window, margins: Margins) -> str | None:
    """Why the readings need the pool's fast interval; None: far from every limit."""
    for check in NEAR:
        why = check(window, margins)
        if why is not None:
            return why
    return None

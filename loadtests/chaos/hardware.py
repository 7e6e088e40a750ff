"""What the hardware scenarios must show beyond the objective: when the gateway drained the
failing replica against when the fault struck, and what the crash cost in retries.

The drain's time is the gateway's own, from its timeline (``/admin/history``: the audited
``drain by hardware`` event, wall seconds); the fault's is the runner's log of the action
(seconds since time zero, which is a wall time). Retries are the gateway's
``gateway_retries_total`` over the run (`loadtests.gateway_counters`), which Locust cannot see.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from loadtests.chaos.gwstate import ADMIN_KEY_ENV
from loadtests.chaos.objectives import Check
from loadtests.gateway_counters import scrape

TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Seen:
    """What a hardware check reads after the run."""

    t0: float  # wall seconds of time zero
    log: Sequence[tuple[float, str]]  # (seconds since t0, action label), as the runner ran them
    drains: Sequence[tuple[float, str, str]]  # (seconds since t0, target, detail) by hardware
    retries: float  # retries the gateway sent during the run, for any cause
    failed_on: Mapping[str, float] = field(default_factory=dict)  # replica -> failed attempts

    def acted(self, label_start: str) -> float | None:
        """When the first action whose label starts so ran (seconds since t0)."""
        return next((t for t, label in self.log if label.startswith(label_start)), None)


HardwareCheck = Callable[[Seen], list[Check]]


def retries(url: str) -> float:
    counters = scrape(url)
    return sum(v for (name, _), v in counters.items() if name == "gateway_retries_total")


def failed_attempts(url: str) -> dict[str, float]:
    """Upstream attempts that did not succeed, by replica (each one a retry or a failure)."""
    failed: dict[str, float] = {}
    for (name, labels), value in scrape(url).items():
        found = dict(labels)
        if name == "gateway_upstream_attempts_total" and found.get("outcome") != "success":
            replica = found.get("replica", "?")
            failed[replica] = failed.get(replica, 0.0) + value
    return failed


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def drains(url: str, t0: float) -> list[tuple[float, str, str]]:
    key = os.environ.get(ADMIN_KEY_ENV)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    doc: dict[str, Any] = httpx.get(
        f"{url}/admin/history", headers=headers, timeout=TIMEOUT_S, trust_env=False
    ).json()
    events = doc.get("events") or []
    return sorted(
        (float(e["t"]) - t0, str(e["subject"]), str(e["detail"]))
        for e in events
        if e.get("by") == "hardware" and str(e.get("detail", "")).startswith("drain ")
    )


def drained_before(action: str, lead_s: float, replica: str) -> HardwareCheck:
    """The replica was drained by the hardware rules at least ``lead_s`` before ``action``,
    and the crash caused no retry: no attempt failed on the killed ``replica``."""

    def check(seen: Seen) -> list[Check]:
        crashed = seen.failed_on.get(replica, 0.0)
        struck = seen.acted(action)
        first = seen.drains[0][0] if seen.drains else None
        ahead = None if struck is None or first is None else struck - first
        shown = "no hardware drain" if ahead is None else f"{ahead:.2f} s before"
        return [
            Check(
                f"drained before {action}",
                f"≥ {lead_s:g} s before",
                shown,
                ahead is not None and ahead >= lead_s,
            ),
            Check(
                f"failed attempts on {replica} (the crash's retries)",
                "0",
                f"{crashed:.0f} ({seen.retries:.0f} retries in all, any cause)",
                crashed == 0,
            ),
        ]

    return check


def drained_within(action: str, within_s: float) -> HardwareCheck:
    """The replica was drained by the hardware rules within ``within_s`` after ``action``."""

    def check(seen: Seen) -> list[Check]:
        struck = seen.acted(action)
        after = [t - struck for t, _, _ in seen.drains if struck is not None and t >= struck - 1]
        shown = "no hardware drain" if not after else f"{after[0]:.2f} s after"
        return [
            Check(
                f"drained after {action}",
                f"≤ {within_s:g} s",
                shown,
                bool(after) and after[0] <= within_s,
            )
        ]

    return check


def no_drain_and_retries(replica: str) -> HardwareCheck:
    """Signals off: what the early drain saved, shown as the attempts the crash failed on
    ``replica`` (more than 0), each one retried."""

    def check(seen: Seen) -> list[Check]:
        crashed = seen.failed_on.get(replica, 0.0)
        return [
            Check("hardware drains (signals off)", "0", str(len(seen.drains)), not seen.drains),
            Check(
                f"failed attempts on {replica} (what the drain saves)",
                "> 0",
                f"{crashed:.0f} ({seen.retries:.0f} retries in all)",
                crashed > 0,
            ),
        ]

    return check


def no_drain() -> HardwareCheck:
    """Signals off: the replica keeps serving on a GPU with an uncorrectable error."""

    def check(seen: Seen) -> list[Check]:
        return [Check("hardware drains (signals off)", "0", str(len(seen.drains)), not seen.drains)]

    return check

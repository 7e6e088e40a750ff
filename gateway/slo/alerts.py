"""The SRE workbook's multi-window, multi-burn-rate alert table, and each alert's state.

An alert fires while the burn rate over its long window *and* over its short window both exceed its
factor: the long window makes it significant (the factors: `ALERT_RULES`, and docs/slos.md), the
short one makes it stop soon after the burn stops (Google SRE workbook, "Alerting on SLOs", table
5-8). Each state remembers since when it has been firing (or quiet), in wall time.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger(__name__)

Severity = Literal["page", "ticket"]

# Burn-rate windows reported for every SLO, by display name.
BURN_WINDOWS: dict[str, float] = {
    "5m": 300.0,
    "30m": 1800.0,
    "1h": 3600.0,
    "6h": 21_600.0,
    "1d": 86_400.0,
    "3d": 259_200.0,
}


@dataclass(frozen=True, slots=True)
class AlertRule:
    name: str
    severity: Severity
    long_window: str  # a key of BURN_WINDOWS
    short_window: str
    factor: float


ALERT_RULES: tuple[AlertRule, ...] = (
    AlertRule("page-1h-5m", "page", "1h", "5m", 14.4),
    AlertRule("page-6h-30m", "page", "6h", "30m", 6.0),
    AlertRule("ticket-3d-6h", "ticket", "3d", "6h", 1.0),
)


class AlertState:
    """Whether one rule fires for one SLO, since when, and the burn rates that decided it."""

    def __init__(self, rule: AlertRule, slo: str) -> None:
        self.rule = rule
        self.slo = slo
        self.firing = False
        self.since: float | None = None  # wall time of the last change; None: never fired
        self.burn_long = 0.0
        self.burn_short = 0.0

    def update(self, burn_rates: dict[str, float], wall: float, judged: bool = True) -> bool:
        """Re-evaluates against fresh burn rates; True if the state changed. ``judged``: the
        windows hold enough events to judge the rule (a correctness SLO's sample may not)."""
        self.burn_long = burn_rates[self.rule.long_window]
        self.burn_short = burn_rates[self.rule.short_window]
        firing = judged and self.burn_long > self.rule.factor and self.burn_short > self.rule.factor
        if firing == self.firing:
            return False
        self.firing = firing
        self.since = wall
        if firing:
            log.warning(
                "SLO %s: %s alert %s firing (burn %s %.1fx, %s %.1fx > %gx)",
                self.slo, self.rule.severity, self.rule.name, self.rule.long_window,
                self.burn_long, self.rule.short_window, self.burn_short, self.rule.factor,
            )  # fmt: skip
        else:
            log.warning("SLO %s: alert %s resolved", self.slo, self.rule.name)
        return True

    def describe(self) -> str:
        return (
            f"{self.slo} {self.rule.name} (burn {self.rule.long_window} {self.burn_long:.1f}x, "
            f"{self.rule.short_window} {self.burn_short:.1f}x)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.rule.name,
            "severity": self.rule.severity,
            "long_window": self.rule.long_window,
            "short_window": self.rule.short_window,
            "factor": self.rule.factor,
            "burn_long": round(self.burn_long, 4),
            "burn_short": round(self.burn_short, 4),
            "firing": self.firing,
            "since": self.since,
        }

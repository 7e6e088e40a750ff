"""Burn-driven policy: while a model's fast-burn alert fires, spend less of its error budget.

Retries and hedges add load exactly when a pool is sick, and waiting for a slow primary burns
latency budget; so while a page-severity alert fires the gateway halves the retry budget (by
default), turns hedging off and prefers the fallback earlier. Off unless configured; each
engage and disengage is logged once, and the state is part of the ``/slo`` document.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from gateway.clock import Clock
from gateway.slo.config import BurnPolicyConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PolicyAdjustment:
    """Multipliers the request path applies to a model's policy; `NORMAL` changes nothing.

    ``hedging_enabled`` False turns hedging off; True leaves the model's hedge config as is.
    """

    retry_budget_factor: float = 1.0
    hedging_enabled: bool = True
    fallback_margin_factor: float = 1.0
    reason: str | None = None


NORMAL = PolicyAdjustment()


class BurnPolicy:
    """The adjustment in force for one model, engaged while its fast burn lasts."""

    def __init__(self, model: str, config: BurnPolicyConfig, clock: Clock) -> None:
        self.model = model
        self.config = config
        self._clock = clock
        self.current = NORMAL
        # wall time of the last engage/disengage
        self.since: float | None = None
        self.changes = 0

    @property
    def engaged(self) -> bool:
        return self.current is not NORMAL

    def update(self, fast_burn: bool, reason: str = "fast burn") -> PolicyAdjustment:
        """Engages or disengages on a change of ``fast_burn``; returns the adjustment in force."""
        engage = fast_burn and self.config.enabled
        if engage == self.engaged:
            return self.current
        self.changes += 1
        self.since = self._clock.wall()
        if engage:
            self.current = PolicyAdjustment(
                retry_budget_factor=self.config.retry_budget_factor,
                hedging_enabled=not self.config.disable_hedging,
                fallback_margin_factor=self.config.fallback_margin_factor,
                reason=reason,
            )
            log.warning(
                "burn policy for %s engaged: retry budget x%g, hedging %s, fallback margin x%g"
                " (%s)",
                self.model,
                self.current.retry_budget_factor,
                "on" if self.current.hedging_enabled else "off",
                self.current.fallback_margin_factor,
                reason,
            )
        else:
            self.current = NORMAL
            log.warning("burn policy for %s disengaged: fast burn over", self.model)
        return self.current

    def to_json(self) -> dict[str, Any]:
        return {
            "enabled": self.config.enabled,
            "engaged": self.engaged,
            "since": self.since,
            "changes": self.changes,
            "adjustment": asdict(self.current),
        }

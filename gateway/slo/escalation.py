"""The burn policy's vote: a single-route model served by a vote while its answers are wrong.

A model on one route has no second opinion on the answers it serves; a vote over k versions
has one on every answer, at k times the replica work. So the vote is the burn policy's action
for a correctness SLO that burns fast: engaged when one of the model's correctness SLOs fires
a page alert, released once none has fired for ``recover_s`` (a vote's answers dilute the
burn within seconds, so releasing at once would flap). The control process decides; the
workers route by what its snapshot says (`gateway.snapshot.messages.ModelView.escalation`).
Quarantining the replica found wrong usually ends the burn first: the intended order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gateway.clock import Clock
from gateway.slo.config import VoteEscalationConfig

log = logging.getLogger(__name__)

# (model, engaged, reason): each switch, for the audit trail and the timeline
Switched = Callable[[str, bool, str], None]


class VoteEscalation:
    """Whether one model is served by its vote now, why, and since when."""

    def __init__(self, model: str, config: VoteEscalationConfig, clock: Clock) -> None:
        self.model = model
        self.config = config
        self._clock = clock
        self.reason: str | None = None  # set while engaged
        self.since: float | None = None  # wall time of the last switch
        self.changes = 0
        self._quiet_since: float | None = None  # monotonic: the burn stopped then

    @property
    def engaged(self) -> bool:
        return self.reason is not None

    def update(self, burning: bool, reason: str, switched: Switched) -> None:
        """Engages while ``burning``; releases after ``recover_s`` without a burn."""
        now = self._clock.now()
        if burning:
            self._quiet_since = None
            if not self.engaged:
                self._switch(f"correctness burn: {reason}", switched)
            return
        if not self.engaged:
            return
        if self._quiet_since is None:
            self._quiet_since = now
        elif now - self._quiet_since >= self.config.recover_s:
            self._switch(None, switched)

    def _switch(self, reason: str | None, switched: Switched) -> None:
        self.reason = reason
        self.since = self._clock.wall()
        self.changes += 1
        self._quiet_since = None
        if reason is not None:
            k = self.config.k
            log.warning("model %s escalated to a vote over %d versions (%s)", self.model, k, reason)
            switched(self.model, True, reason)
        else:
            why = f"no correctness burn for {self.config.recover_s:g} s"
            log.warning("model %s back on its single route: %s", self.model, why)
            switched(self.model, False, why)

    def to_json(self) -> dict[str, Any]:
        return {
            "enabled": self.config.enabled,
            "engaged": self.engaged,
            "reason": self.reason,
            "since": self.since,
            "changes": self.changes,
            "k": self.config.k,
            "recover_s": self.config.recover_s,
        }

"""The burn policy's vote: a single-route model served by a vote while its answers are wrong.

A model on one route has no second opinion on the answers it serves; a vote over k versions
has one on every answer, at k times the replica work. So the vote is the burn policy's action
for a correctness SLO that burns fast: engaged when one of the model's correctness SLOs fires
a page alert, released once none has fired for ``recover_s`` *and* the vote shows that the
single route would not burn again: a vote's right answers dilute the burn within seconds,
while the replica that caused it may still be wrong. So while the model is voted, each vote's
verdict on the leg its own pool served (`observe`: rows, rows that dissented from the quorum)
is the single route's evidence; at the end of ``recover_s`` without a burn, the model goes
back only if that leg's wrong share over the quiet time is at most ``limit`` (the lowest rate
a page alert of its correctness SLOs fires at); else the quiet time starts over. The control
process decides; the workers route by what its snapshot says
(`gateway.snapshot.messages.ModelView.escalation`).
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
        self.limit = 1.0  # the single route's wrong share it may go back at (set by the book)
        self.rows = 0  # the single route's rows the votes judged since the quiet time began
        self.wrong = 0  # ... and of those, the rows it was found wrong on

    def observe(self, rows: int, dissented: int) -> None:
        """A vote's verdict on the leg the model's own pool served (while it is voted)."""
        if self.engaged:
            self.rows += rows
            self.wrong += dissented

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
            self._restart_quiet(now)
        elif now - self._quiet_since >= self.config.recover_s:
            if self.rows and self.wrong / self.rows > self.limit:
                why = f"its own pool's legs were wrong on {self.wrong} of {self.rows} rows"
                log.warning("model %s stays voted: %s", self.model, why)
                self._restart_quiet(now)
            else:
                self._switch(None, switched)

    def _restart_quiet(self, now: float) -> None:
        self._quiet_since = now
        self.rows = self.wrong = 0

    def _switch(self, reason: str | None, switched: Switched) -> None:
        self.rows = self.wrong = 0
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
            "single_route": {"rows": self.rows, "wrong": self.wrong, "limit": self.limit},
        }

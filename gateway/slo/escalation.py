"""The burn policy's vote: a single-route model served by a vote while its answers are wrong.

A model on one route has no second opinion on the answers it serves; a vote over k versions
has one on every answer, at k times the replica work. So the vote is the burn policy's action
for a correctness SLO that burns fast: engaged when one of the model's correctness SLOs fires
a page alert, released once none has fired for ``recover_s`` *and* the votes show that the
single route would not burn again: a vote's right answers dilute the burn within seconds,
while the replica that caused it may still be wrong. So while the model is voted, each vote's
verdict on the leg its own pool served (`observe`: the replica, its rows, the rows it
dissented on) is the single route's evidence. Diverse versions disagree on a few rows by
design, so a replica is judged against its pool's other replicas, not against zero: at the end
of ``recover_s`` without a burn, the model goes back unless a replica dissented more than its
peers by over ``limit`` (the lowest wrong rate a page alert of its correctness SLOs fires at),
beyond two standard errors of its count; else the quiet time starts over. The control
process decides; the workers route by what its snapshot says
(`gateway.snapshot.messages.ModelView.escalation`).
Quarantining the replica found wrong usually ends the burn first: the intended order.
"""

from __future__ import annotations

import logging
import math
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
        self.limit = 1.0  # a replica's excess wrong share it may go back at (set by the book)
        # since the quiet time began, by replica of the model's pool: rows the votes judged,
        # rows it dissented on
        self.evidence: dict[str, list[int]] = {}

    def observe(self, replica_id: str, rows: int, dissented: int) -> None:
        """A vote's verdict on the leg the model's own pool served (while it is voted)."""
        if self.engaged:
            counts = self.evidence.setdefault(replica_id, [0, 0])
            counts[0] += rows
            counts[1] += dissented

    def still_wrong(self) -> str | None:
        """Why the single route would still burn: a replica that dissented more than its peers
        by over `limit`, beyond two standard errors; None if none did."""
        rows = sum(c[0] for c in self.evidence.values())
        wrong = sum(c[1] for c in self.evidence.values())
        for replica_id, (mine, dissented) in sorted(self.evidence.items()):
            if not mine:
                continue
            peers = rows - mine
            base = (wrong - dissented) / peers if peers else 0.0
            noise = 2 * math.sqrt(max(base * (1 - base), 1 / mine) / mine)
            if dissented / mine - base > self.limit + noise:
                share = f"{dissented} of {mine} rows (its peers {base:.2%})"
                return f"{replica_id} dissented from the votes on {share}"
        return None

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
            why = self.still_wrong()
            if why is not None:
                log.warning("model %s stays voted: %s", self.model, why)
                self._restart_quiet(now)
            else:
                self._switch(None, switched)

    def _restart_quiet(self, now: float) -> None:
        self._quiet_since = now
        self.evidence = {}

    def _switch(self, reason: str | None, switched: Switched) -> None:
        self.evidence = {}
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
            "single_route": {
                "limit": self.limit,
                "rows": {r: c[0] for r, c in sorted(self.evidence.items())},
                "dissented": {r: c[1] for r, c in sorted(self.evidence.items())},
            },
        }

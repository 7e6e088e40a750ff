"""The audit trail of operators' actions: who did what to which target, when, why, and how.

One `AuditEvent` per action (a drain, an eject, a pause, ...), and per decision obeyed that
another gateway took, is written as one JSON log line on the ``gateway.audit`` logger (fields
``who``, ``action``, ``target``, ``reason``, ``outcome``, ``at``, ``gateway``) and recorded in
the dashboard's event timeline (``/admin/history``). ``who`` is an operator's name
(``server.admin.operators``), never a key. Rollouts record their decisions here too, with a
rule's name as ``who``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gateway.audit")


@dataclass(frozen=True, slots=True)
class AuditEvent:
    # wall seconds
    at: float
    # an operator's name, or the rule that decided
    who: str
    # drain | eject | restore | pause | resume | ...
    action: str
    # replica:<id> | pool:<name>
    target: str
    # the operator's own words ("" when none given)
    reason: str
    # applied | applied, not shared: ... | obeyed (decided on gateway X) | ...
    outcome: str
    # the instance that wrote this event
    gateway: str

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "who": self.who,
            "action": self.action,
            "target": self.target,
            "reason": self.reason,
            "outcome": self.outcome,
            "gateway": self.gateway,
        }

    def summary(self) -> str:
        """One line for people: ``drain by alice: disk full (applied)``."""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.action} by {self.who}{why} ({self.outcome})"


def log_audit(event: AuditEvent) -> None:
    """The event as one structured log line (its fields top-level in the JSON formatter), at
    WARNING so that a gateway logging only warnings still keeps its audit trail."""
    fields = {"event": "audit", **event.to_json()}
    log.warning("audit: %s %s", event.target, event.summary(), extra=fields)

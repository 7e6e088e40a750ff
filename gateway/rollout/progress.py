"""A rollout's progress as durable state: its phase, step and the trail of its decisions.

Progress travels as an operator `Decision` (``gateway.state.decisions``) on the target
``rollout:<model>``: the action is the phase, the reason holds the rest as JSON. So it is
stored, shared and ordered as drains are (Redis with every sync, or ``state.decisions_file``),
read back after a restart, and the newest version wins on every gateway. ``declared`` is a
fingerprint of the declaration: progress made under another declaration is not resumed.
The trail (every start, step, pause, promotion, rollback, with who or which rule decided and
the evidence) rides along, bounded to the latest `MAX_TRAIL` entries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Annotated, Any

import msgspec
import orjson
from msgspec import Meta

from gateway.config.rollout import RolloutConfig
from gateway.state.decisions import Decision
from gateway.state.limits import PROGRESS_CHARS, Wall

MAX_TRAIL = 100
# phases: waiting (declared, not started) | shadow | canary | paused | rolled_back | promoted
# | aborted
# the candidate serves its step's share
SERVING_PHASES = frozenset({"canary", "paused"})
COMPARING_PHASES = frozenset({"shadow", "canary", "paused"})


def rollout_key(model: str) -> str:
    return f"rollout:{model}"


def fingerprint(pool: str, config: RolloutConfig) -> str:
    text = pool + "\n" + config.model_dump_json()
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Stored(msgspec.Struct, frozen=True):
    """A progress as its decision's reason holds it (`Progress.reason`), with its bounds."""

    declared: Annotated[str, Meta(max_length=64)]
    step: Annotated[int, Meta(ge=0, le=1_000)]
    since: Wall
    trail: Annotated[list[dict[str, Any]], Meta(max_length=MAX_TRAIL)]


@dataclass(frozen=True, slots=True)
class Progress:
    phase: str
    # index into the declaration's steps (canary)
    step: int
    # the declaration's fingerprint
    declared: str
    # wall seconds this phase and step began
    since: float
    trail: tuple[dict[str, Any], ...] = ()
    # of the decision that holds it (0: not stored yet)
    version: int = 0

    def share(self, config: RolloutConfig) -> float:
        """Percent of requests the candidate serves now."""
        if self.phase == "promoted":
            return 100.0
        if self.phase in SERVING_PHASES and config.mode == "canary":
            return config.steps[max(0, min(self.step, len(config.steps) - 1))]
        return 0.0

    def then(self, phase: str, step: int, at: float, entry: dict[str, Any]) -> Progress:
        """The next progress; ``since`` moves only with the phase or the step."""
        trail = (*self.trail, entry)[-MAX_TRAIL:]
        since = self.since if (phase, step) == (self.phase, self.step) else at
        return replace(self, phase=phase, step=step, since=since, trail=trail)

    def reason(self) -> str:
        """The decision's reason: within `PROGRESS_CHARS` (the oldest trail entries go)."""
        trail = list(self.trail)
        while True:
            doc = {
                "declared": self.declared,
                "step": self.step,
                "since": self.since,
                "trail": trail,
            }
            text = orjson.dumps(doc).decode()
            if len(text) <= PROGRESS_CHARS or not trail:
                return text
            trail = trail[max(1, len(trail) // 4) :]

    @classmethod
    def from_decision(
        cls, decision: Decision, config: RolloutConfig | None = None
    ) -> Progress | None:
        """The progress a decision holds; None when it holds none (malformed, out of bounds,
        or, given the declaration ``config``, a step outside its plan)."""
        try:
            doc = msgspec.json.decode(decision.reason, type=_Stored)
        except (msgspec.DecodeError, TypeError, ValueError):
            return None
        if config is not None:
            last = len(config.steps) - 1
            if not 0 <= doc.step <= last or (decision.action == "promoted" and doc.step != last):
                return None
        return cls(
            decision.action, doc.step, doc.declared, doc.since, tuple(doc.trail), decision.version
        )

    def to_json(self, config: RolloutConfig) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "step": self.step,
            "share_percent": self.share(config),
            "since": self.since,
            "declared": self.declared,
            "version": self.version,
        }

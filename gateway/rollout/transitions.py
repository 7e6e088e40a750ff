"""The step plan of a rollout as a table: which phase and step each action leads to, from where.

One table serves both sides: an operator's action here (`Rollouts.act`) asks it where the action
goes, and progress read back from the store or another gateway (`legal`) is accepted only if
its trail continues this gateway's, each new entry one legal move of the plan, ending where the
progress says. So a value written straight into the store cannot jump a rollout to "promoted"
from a step that is not the last, to a step outside the plan, or to a phase no action leads
to; what it can still do is take the moves an operator could.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.config.rollout import RolloutConfig
from gateway.rollout.progress import COMPARING_PHASES, Progress

RUNNING = frozenset({"shadow", "canary"})
STARTABLE = frozenset({"waiting", "paused", "rolled_back", "aborted"})
# (phase, step)
State = tuple[str, int]


def target(action: str, state: State, config: RolloutConfig) -> State | None:
    """Where ``action`` takes a rollout in ``state``; None when it cannot apply there."""
    phase, step = state
    last = len(config.steps) - 1
    if action == "lead":
        return state
    if action == "start" and phase in STARTABLE:
        return (config.mode, step if phase == "paused" else 0)
    if action == "step" and phase == "canary" and step < last:
        return ("canary", step + 1)
    if action == "promote" and phase in COMPARING_PHASES:
        return ("promoted", last)
    if action == "rollback" and phase == "canary":
        return ("rolled_back", step)
    if action == "pause" and phase in RUNNING:
        return ("paused", step)
    if action == "abort" and phase != "aborted":
        return ("aborted", step)
    return None


def legal(before: Progress, after: Progress, config: RolloutConfig) -> str | None:
    """None when ``after`` follows ``before`` by the plan; else why it does not.

    The moves are replayed from the newest trail entry both share (where two gateways'
    decisions forked, if they did: the fork the store kept is replayed from there)."""
    if (after.phase, after.step) == (before.phase, before.step):
        # the same phase and step: a new lead or trail, nothing moves
        return None
    start = _shared(before, after.trail)
    if start is None:
        return "its trail shares no entry with the one known here"
    state, entries = start
    for entry in entries:
        action, phase, step = entry.get("action"), entry.get("phase"), entry.get("step")
        if not isinstance(action, str) or not isinstance(phase, str) or type(step) is not int:
            return "a trail entry without its action, phase and step"
        if target(action, state, config) != (phase, step):
            return f"{action} cannot lead from {state[0]} step {state[1]} to {phase} step {step}"
        state = (phase, step)
    if state != (after.phase, after.step):
        return f"its trail ends at {state[0]} step {state[1]}, not at {after.phase}"
    return None


def _shared(
    before: Progress, trail: Sequence[dict[str, Any]]
) -> tuple[State, Sequence[dict[str, Any]]] | None:
    """The state after the newest entry of ``trail`` known in ``before``, and the entries
    after it (None: none is known)."""
    if not before.trail:
        return (before.phase, before.step), trail
    known = {_canonical(e) for e in before.trail}
    for i in range(len(trail) - 1, -1, -1):
        if _canonical(trail[i]) in known:
            phase, step = trail[i].get("phase"), trail[i].get("step")
            if not isinstance(phase, str) or type(step) is not int:
                return None
            return (phase, step), trail[i + 1 :]
    return None


def _canonical(entry: Any) -> bytes:
    """An entry as JSON with sorted keys: equal here and after a trip through the store."""
    try:
        return orjson.dumps(entry, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return b""

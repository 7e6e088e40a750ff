"""One shadow comparison: the client's answer and the other pool's, as the vote compares.

Both answers are in the client's tensor names (each pool's dialect mapped them back). The
outputs both hold are compared with the vote's rule (`gateway.voting.rule`: labels
exactly, numbers within tolerance, probabilities beside labels not held to it): the answers
agree when a vote of the two reaches a quorum of two on every row. Each output is also
compared on its own, for the disagreements by output. Shapes that differ only by dimensions
of size 1 are the same answer (servers shape labels [n] or [n, 1]).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gateway.config.rollout import RolloutConfig
from gateway.voting.rule import VoteRule, vote

Outputs = Mapping[str, Any]
MISSING = "(outputs missing)"


def rule_of(config: RolloutConfig) -> VoteRule:
    return VoteRule(2, config.label_outputs, config.numeric_atol, config.numeric_rtol)


def compare(client: Outputs, other: Outputs, rule: VoteRule) -> tuple[bool, list[str]]:
    """Whether the answers agree, and the outputs on which they differ."""
    names = [name for name in client if name in other]
    if not names:
        return False, [MISSING]
    mine = {name: np.asarray(client[name]) for name in names}
    theirs = {name: _like(np.asarray(other[name]), mine[name]) for name in names}
    if all(np.array_equal(mine[n], theirs[n]) for n in names):
        # the same answer (the common case): no vote needed
        return True, []
    agreed = vote({"client": mine, "other": theirs}, rule).agreed
    differing = [
        name
        for name in names
        if not vote({"client": {name: mine[name]}, "other": {name: theirs[name]}}, rule).agreed
    ]
    return agreed, differing


def _like(array: np.ndarray[Any, Any], model: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if array.shape != model.shape and array.size == model.size:
        return array.reshape(model.shape)
    return array

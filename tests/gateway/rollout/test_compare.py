"""A shadow comparison uses the vote's rule: labels exactly, numbers within tolerance."""

from __future__ import annotations

import numpy as np

from gateway.config.rollout import RolloutConfig
from gateway.rollout.compare import MISSING, compare, rule_of

RULE = rule_of(RolloutConfig(candidate="next"))


def test_same_labels_agree_even_when_probabilities_differ() -> None:
    mine = {"label": np.array([1, 2]), "probabilities": np.array([[0.9, 0.1], [0.2, 0.8]])}
    theirs = {"label": np.array([[1], [2]]), "probabilities": np.array([[0.6, 0.4], [0.4, 0.6]])}
    agreed, differing = compare(mine, theirs, RULE)
    assert agreed
    assert differing == ["probabilities"]


def test_one_differing_row_is_a_disagreement_by_its_output() -> None:
    agreed, differing = compare({"label": np.array([1, 2])}, {"label": np.array([1, 3])}, RULE)
    assert not agreed
    assert differing == ["label"]


def test_numbers_alone_agree_within_tolerance() -> None:
    close = compare({"y": np.array([1.0, 2.0])}, {"y": np.array([1.0005, 2.0])}, RULE)
    far = compare({"y": np.array([1.0, 2.0])}, {"y": np.array([1.5, 2.0])}, RULE)
    assert close == (True, [])
    assert far == (False, ["y"])


def test_answers_without_a_common_output_disagree() -> None:
    assert compare({"label": np.array([1])}, {"other": np.array([1])}, RULE) == (False, [MISSING])


def test_identical_answers_agree_on_every_output() -> None:
    same = {"label": np.array([3, 1]), "probabilities": np.array([[0.1, 0.9], [0.8, 0.2]])}
    assert compare(same, {k: v.copy() for k, v in same.items()}, RULE) == (True, [])

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from gateway.voting.rule import VoteRule, vote
from replicas.faults import corrupt

Answer = dict[str, np.ndarray[Any, Any]]


def answer(labels: list[int], seed: int = 0, classes: int = 10) -> Answer:
    """A well-formed classifier answer: scores peak at each row's label."""
    rng = np.random.default_rng(seed)
    scores = rng.uniform(0.0, 0.05, size=(len(labels), classes))
    scores[np.arange(len(labels)), labels] = 0.9
    scores /= scores.sum(axis=1, keepdims=True)
    return {
        "label": np.asarray(labels, dtype=np.int64),
        "probabilities": scores.astype(np.float32),
    }


def test_unanimous() -> None:
    legs = {"mlp": answer([3, 1]), "svm": answer([3, 1], 1), "forest": answer([3, 1], 2)}
    result = vote(legs, VoteRule(quorum=2))
    assert result.agreed and result.tally == "3/3"
    assert result.dissenters == {} and result.rows_without_quorum == []
    assert result.outputs["label"].tolist() == [3, 1]
    assert result.outputs["label"].dtype == np.int64
    assert result.outputs["probabilities"].dtype == np.float32
    mean = np.mean([leg["probabilities"] for leg in legs.values()], axis=0)
    np.testing.assert_allclose(result.outputs["probabilities"], mean, rtol=1e-6)


def test_one_corrupted_leg_is_outvoted() -> None:
    good = answer([4, 7, 0])
    bad = corrupt(answer([4, 7, 0], 2), random.Random(0))  # wrong labels, swapped scores
    legs = {"mlp": good, "svm": answer([4, 7, 0], 1), "forest": bad}
    result = vote(legs, VoteRule(quorum=2))
    assert result.agreed and result.tally == "2/3"
    assert result.dissenters == {"forest": 3}
    assert result.outputs["label"].tolist() == [4, 7, 0]
    mean = (good["probabilities"] + legs["svm"]["probabilities"]) / 2
    np.testing.assert_allclose(result.outputs["probabilities"], mean, rtol=1e-6)
    assert result.agreeing == {"mlp": 3, "svm": 3, "forest": 0}


def test_three_different_labels_have_no_quorum() -> None:
    legs = {"a": answer([1]), "b": answer([2]), "c": answer([3])}
    result = vote(legs, VoteRule(quorum=2))
    assert not result.agreed and result.outputs == {}
    assert result.rows_without_quorum == [0] and result.tally == "1/3"
    assert result.dissenters == {}  # nobody dissents from a quorum that does not exist
    assert "no quorum of 2 on 1 of 1 rows" in result.reason


def test_batch_rows_with_mixed_agreement() -> None:
    legs = {
        "a": answer([0, 1, 2, 3]),
        "b": answer([0, 9, 2, 3]),  # dissents on row 1
        "c": answer([0, 1, 2, 8]),  # dissents on row 3
    }
    result = vote(legs, VoteRule(quorum=2))
    assert result.agreed and result.tally == "2/3"
    assert result.outputs["label"].tolist() == [0, 1, 2, 3]
    assert result.dissenters == {"b": 1, "c": 1}
    assert vote(legs, VoteRule(quorum=3)).rows_without_quorum == [1, 3]


def test_one_row_without_quorum_sinks_the_batch() -> None:
    legs = {"a": answer([0, 1]), "b": answer([0, 2]), "c": answer([0, 3])}
    result = vote(legs, VoteRule(quorum=2))
    assert not result.agreed and result.rows_without_quorum == [1]
    assert result.outputs == {}


def test_tie_between_groups_is_no_quorum() -> None:
    legs = {"a": answer([1]), "b": answer([1]), "c": answer([2]), "d": answer([2])}
    result = vote(legs, VoteRule(quorum=2))
    assert not result.agreed and result.rows_without_quorum == [0]


def test_too_few_legs_answered() -> None:
    result = vote({"a": answer([5])}, VoteRule(quorum=2))
    assert not result.agreed and result.tally == "1/1"
    assert vote({}, VoteRule(quorum=2)).tally == "0/0"


def test_malformed_leg_dissents_on_every_row() -> None:
    short = answer([1, 2])
    short["probabilities"] = short["probabilities"][:, :5]
    legs = {"a": answer([1, 2]), "b": answer([1, 2], 1), "c": short}
    result = vote(legs, VoteRule(quorum=2))
    assert result.agreed and result.dissenters == {"c": 2}


def test_a_leg_with_other_outputs_is_a_missing_answer_not_a_dissent() -> None:
    """A server that returns only its labels where the others also return scores answered
    another question: the others decide, and it dissents on nothing (it was 'every row')."""
    legs = {"a": answer([1, 2]), "b": answer([1, 2], 1)}
    for other in ({"label": np.asarray([1, 2])}, {"predict": np.asarray([1, 2])}):
        result = vote({**legs, "c": other}, VoteRule(quorum=2))
        assert result.agreed and result.tally == "2/2"
        assert result.dissenters == {} and "c" not in result.agreeing
        assert set(result.outputs) == {"label", "probabilities"}


def test_nan_scores_are_a_dissent() -> None:
    broken = answer([6])
    broken["probabilities"][0, 0] = np.nan
    result = vote({"a": answer([6]), "b": answer([6], 1), "c": broken}, VoteRule(quorum=2))
    assert result.agreed and result.dissenters == {"c": 1}
    assert np.isfinite(result.outputs["probabilities"]).all()


def test_numeric_check_with_labels_is_optional() -> None:
    far = answer([2])
    far["probabilities"] = np.roll(far["probabilities"], 1, axis=1)  # label kept, scores moved
    legs = {"a": answer([2]), "b": answer([2], 1), "c": far}
    assert vote(legs, VoteRule(quorum=2)).dissenters == {}
    strict = vote(legs, VoteRule(quorum=2, numeric_atol=0.05, check_numeric_with_labels=True))
    assert strict.agreed and strict.dissenters == {"c": 1}


def test_numeric_only_uses_the_median_with_tolerance() -> None:
    base = np.linspace(0.0, 10.0, 8, dtype=np.float32).reshape(2, 4)
    legs = {
        "a": {"y": base},
        "b": {"y": base + np.float32(0.0005)},  # within atol 1e-3
        "c": {"y": base * np.float32(1.005)},  # within rtol 1 %
        "d": {"y": base + np.asarray([[0.0], [5.0]], dtype=np.float32)},  # row 1 off
    }
    result = vote(legs, VoteRule(quorum=3, label_outputs=()))
    assert result.agreed and result.tally == "3/4"
    assert result.dissenters == {"d": 1}
    assert result.outputs["y"].dtype == np.float32
    expected_row1 = (base[1] + base[1] + 0.0005 + base[1] * 1.005) / 3
    np.testing.assert_allclose(result.outputs["y"][1], expected_row1, rtol=1e-5)


def test_numeric_only_without_agreement() -> None:
    legs = {"a": {"y": np.zeros((1, 3))}, "b": {"y": np.ones((1, 3))}}
    result = vote(legs, VoteRule(quorum=2, label_outputs=()))
    assert not result.agreed and result.rows_without_quorum == [0]


def test_outputs_only_some_legs_return_are_ignored() -> None:
    extra = {**answer([3]), "debug": np.zeros((1, 2))}
    result = vote({"a": answer([3]), "b": answer([3], 1), "c": extra}, VoteRule(quorum=2))
    assert result.agreed and set(result.outputs) == {"label", "probabilities"}
    assert result.dissenters == {}


def test_legs_with_other_integer_widths_still_agree() -> None:
    narrow = answer([5])
    narrow["label"] = narrow["label"].astype(np.int32)
    result = vote({"a": answer([5]), "b": narrow}, VoteRule(quorum=2))
    assert result.agreed and result.outputs["label"].dtype == np.int64


def test_inconsistent_batch_sizes_cannot_be_voted() -> None:
    odd = {"label": np.zeros(2, dtype=np.int64), "probabilities": np.zeros((3, 10))}
    result = vote({"a": odd, "b": odd}, VoteRule(quorum=2))
    assert not result.agreed and "batch" in result.reason


def test_rule_validation() -> None:
    with pytest.raises(ValueError):
        VoteRule(quorum=0)
    with pytest.raises(ValueError):
        VoteRule(quorum=2, numeric_atol=-1)

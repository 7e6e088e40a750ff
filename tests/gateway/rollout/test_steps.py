"""The canary's rule on numbers: rollback needs confidence, advance needs enough evidence."""

from __future__ import annotations

import pytest

from gateway.config.rollout import RolloutConfig
from gateway.rollout.evidence import RolloutEvidence, wilson
from gateway.rollout.steps import MIN_TO_REJECT, next_move

CONFIG = RolloutConfig(
    candidate="next",
    mode="canary",
    steps=(5, 50, 100),
    hold_s=60,
    hold_requests=100,
    min_comparisons=50,
    agreement_target=0.95,
)


def evidence(agreed: int, compared: int, requests: int = 0, errors: int = 0) -> RolloutEvidence:
    found = RolloutEvidence(compared=compared, agreed=agreed)
    found.candidate_requests, found.candidate_errors = requests, errors
    return found


def test_wilson_matches_the_textbook_interval() -> None:
    low, high = wilson(80, 100, 1.96)
    assert low == pytest.approx(0.7112, abs=1e-4)
    assert high == pytest.approx(0.8666, abs=1e-4)
    assert wilson(0, 0, 1.96) == (0.0, 1.0)


def test_a_candidate_that_agrees_80_percent_is_rolled_back_on_its_agreement() -> None:
    move = next_move(CONFIG, 0, evidence(24, 30), held_s=1, burning=False)
    assert (move.action, move.rule) == ("rollback", "agreement")


def test_too_few_comparisons_never_roll_back() -> None:
    few = MIN_TO_REJECT - 1
    assert next_move(CONFIG, 0, evidence(0, few), held_s=1, burning=False).action == "hold"


def test_a_good_step_is_held_until_its_time_or_requests_then_advances() -> None:
    good = evidence(60, 60, requests=60)
    assert next_move(CONFIG, 0, good, held_s=10, burning=False).action == "hold"
    assert next_move(CONFIG, 0, good, held_s=60, burning=False).action == "advance"
    many = evidence(60, 60, requests=100)
    assert next_move(CONFIG, 0, many, held_s=1, burning=False).action == "advance"


def test_a_held_step_without_enough_comparisons_waits_for_evidence() -> None:
    move = next_move(CONFIG, 0, evidence(10, 10, requests=100), held_s=100, burning=False)
    assert (move.action, move.rule) == ("hold", "evidence")


def test_the_last_step_promotes() -> None:
    assert (
        next_move(CONFIG, 2, evidence(60, 60, 100), held_s=100, burning=False).action == "promote"
    )


def test_an_error_burst_rolls_back() -> None:
    move = next_move(CONFIG, 0, evidence(30, 30, requests=40, errors=10), held_s=1, burning=False)
    assert (move.action, move.rule) == ("rollback", "errors")


def test_a_fast_slo_burn_rolls_back() -> None:
    move = next_move(CONFIG, 1, evidence(60, 60, 100), held_s=100, burning=True)
    assert (move.action, move.rule) == ("rollback", "slo_burn")


def test_a_slow_candidate_rolls_back() -> None:
    slow = evidence(30, 30, requests=200)
    slow.candidate_latency.extend([0.050] * 200)
    slow.current_latency.extend([0.005] * 200)
    move = next_move(CONFIG, 0, slow, held_s=1, burning=False)
    assert (move.action, move.rule) == ("rollback", "latency")


def test_one_cold_request_does_not_roll_a_clean_candidate_back() -> None:
    """A p99 over 20 samples is their slowest: the candidate's first, cold request (44 ms
    among 2 ms ones, seen in a clean-clone run) rolled a clean candidate back."""
    cold = evidence(17, 17, requests=20)
    cold.candidate_latency.extend([0.044] + [0.002] * 19)
    cold.current_latency.extend([0.002] * 40)
    assert next_move(CONFIG, 0, cold, held_s=1, burning=False).rule != "latency"
    cold.candidate_latency.extend([0.002] * 180)  # 200 samples: the p99 is not the cold one
    cold.current_latency.extend([0.002] * 160)
    assert next_move(CONFIG, 0, cold, held_s=1, burning=False).rule != "latency"


def test_steps_must_increase_and_end_at_100() -> None:
    with pytest.raises(ValueError, match="increase"):
        RolloutConfig(candidate="x", steps=(5, 1, 100))
    with pytest.raises(ValueError, match="last step"):
        RolloutConfig(candidate="x", steps=(5, 50))

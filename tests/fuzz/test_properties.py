"""Properties of the retry budget, the vote and the SLO windows, on generated inputs.

Each is checked against a few lines of plain model code (what the module's docstring says it
does) over random operation sequences on a `FakeClock`; hypothesis shrinks a failure to the
shortest sequence that shows it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.policies import RetryBudgetConfig
from gateway.retry.budget import RetryBudget
from gateway.slo.window import COARSE_S, FINE_HORIZON_S, FINE_S, SloWindow
from gateway.voting.rule import VoteResult, VoteRule, vote
from tests.support.clock import FakeClock

FAST = settings(max_examples=int(os.environ.get("PROPERTY_EXAMPLES", 150)), deadline=None)
DAY = 86_400.0

# -- retry budget ------------------------------------------------------------------------------

budget_configs = st.builds(
    RetryBudgetConfig,
    ratio=st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]),
    min_per_s=st.sampled_from([0.0, 0.1, 1.0, 2.5]),
    window_s=st.sampled_from([1.0, 2.0, 3.5, 10.0]),
)
budget_steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(0.0, 4.0)),
        st.tuples(st.just("request"), st.integers(1, 5)),
        st.tuples(st.just("spend"), st.sampled_from([1.0, 1.0, 0.5])),
    ),
    max_size=60,
)


@dataclass
class BudgetModel:
    """Requests and retries at their whole seconds; a window is the last ``size`` seconds."""

    config: RetryBudgetConfig
    requests: list[int]
    retries: list[int]

    def window(self, now: float) -> tuple[int, int]:
        size = max(1, math.ceil(self.config.window_s))
        oldest = int(now) - size + 1
        return (
            sum(1 for s in self.requests if s >= oldest),
            sum(1 for s in self.retries if s >= oldest),
        )

    def allowance(self, now: float, scale: float) -> float:
        size = max(1, math.ceil(self.config.window_s))
        requests, _ = self.window(now)
        return scale * (self.config.ratio * requests + self.config.min_per_s * size)


@FAST
@given(config=budget_configs, steps=budget_steps)
def test_the_budget_spends_only_what_its_window_allows(
    config: RetryBudgetConfig, steps: list[tuple[str, Any]]
) -> None:
    clock = FakeClock()
    budget = RetryBudget(config, clock)
    model = BudgetModel(config, [], [])
    for kind, value in steps:
        now = clock.now()
        if kind == "advance":
            clock.advance(value)
        elif kind == "request":
            for _ in range(value):
                budget.record_request()
                model.requests.append(int(now))
        else:
            before = budget.snapshot()
            allowed = model.allowance(now, value) - model.window(now)[1] >= 1.0
            spent = budget.try_spend(value)
            assert spent == allowed  # spends exactly when the window has room for one more
            after = budget.snapshot()
            if spent:
                model.retries.append(int(now))
                # never more retries in the window than ratio × its requests + the floor
                assert model.window(now)[1] <= model.allowance(now, value)
                assert after["spent_total"] == before["spent_total"] + 1
            else:  # a refusal records nothing but the refusal
                assert after["retries_in_window"] == before["retries_in_window"]
                assert after["spent_total"] == before["spent_total"]
                assert after["refused_total"] == before["refused_total"] + 1
        assert budget.snapshot()["requests_in_window"] == model.window(clock.now())[0]
        assert budget.snapshot()["retries_in_window"] == model.window(clock.now())[1]
        assert budget.spent_total == len(model.retries)


@FAST
@given(config=budget_configs, steps=budget_steps)
def test_the_balance_is_never_negative_while_time_stands(
    config: RetryBudgetConfig, steps: list[tuple[str, Any]]
) -> None:
    """Requests and spends (at full scale) alone never take the balance below zero."""
    budget = RetryBudget(config, FakeClock())
    for kind, value in steps:
        if kind == "request":
            for _ in range(value):
                budget.record_request()
        elif kind == "spend":
            budget.try_spend()
        assert budget.balance() >= 0.0


def test_the_balance_is_never_negative_as_the_window_slides() -> None:
    clock = FakeClock()
    budget = RetryBudget(RetryBudgetConfig(ratio=0.5, min_per_s=0.0, window_s=2.0), clock)
    for _ in range(2):
        budget.record_request()  # second 1000: pays for one retry
    clock.advance(1.0)
    assert budget.try_spend()  # second 1001
    clock.advance(1.0)  # second 1002: the request left the window, the retry has not
    assert budget.balance() == 0.0  # was -1.0: more retries in the window than it allows
    assert not budget.try_spend()


# -- voting ------------------------------------------------------------------------------------

CLASSES = 3


@st.composite
def ballots(draw: st.DrawFn) -> tuple[dict[str, dict[str, Any]], VoteRule, list[list[bool]]]:
    """Well-formed legs (labels from a small alphabet, scores maybe NaN), a quorum, NaN rows."""
    legs = draw(st.integers(1, 5))
    rows = draw(st.integers(1, 4))
    quorum = draw(st.integers(1, legs))
    answers: dict[str, dict[str, Any]] = {}
    nan_rows: list[list[bool]] = []
    for leg in range(legs):
        labels = draw(st.lists(st.integers(0, CLASSES - 1), min_size=rows, max_size=rows))
        scores = np.asarray(
            draw(st.lists(st.floats(0, 1, width=32), min_size=rows * 3, max_size=rows * 3)),
            dtype=np.float32,
        ).reshape(rows, 3)
        nans = draw(st.lists(st.booleans(), min_size=rows, max_size=rows))
        scores[np.asarray(nans), 0] = np.nan
        answers[f"leg{leg}"] = {"label": np.asarray(labels, np.int64), "probabilities": scores}
        nan_rows.append(nans)
    return answers, VoteRule(quorum=quorum), nan_rows


def oracle(
    answers: dict[str, dict[str, Any]], quorum: int, nan_rows: list[list[bool]]
) -> tuple[list[int], dict[str, int]]:
    """Rows without a quorum and each leg's dissents, row by row as the docstring says."""
    legs = list(answers)
    rows = len(nan_rows[0])
    missing: list[int] = []
    dissents = dict.fromkeys(legs, 0)
    for row in range(rows):
        groups: dict[int, list[int]] = {}
        for i, leg in enumerate(legs):
            groups.setdefault(int(answers[leg]["label"][row]), []).append(i)
        sizes = sorted((len(g) for g in groups.values()), reverse=True)
        largest = max(groups.values(), key=len)
        members = [i for i in largest if not nan_rows[i][row]]  # a NaN never counts
        if (len(sizes) > 1 and sizes[0] == sizes[1]) or len(members) < quorum:
            missing.append(row)
            continue
        for i, leg in enumerate(legs):
            dissents[leg] += i not in members
    return missing, {leg: n for leg, n in dissents.items() if n}


@FAST
@given(ballot=ballots())
def test_the_vote_follows_its_rules_row_by_row(
    ballot: tuple[dict[str, dict[str, Any]], VoteRule, list[list[bool]]],
) -> None:
    answers, rule, nan_rows = ballot
    result = vote(answers, rule)
    missing, dissents = oracle(answers, rule.quorum, nan_rows)
    assert result.rows_without_quorum == missing
    assert result.dissenters == dissents  # dissent only on rows that have a quorum
    assert result.agreed == (not missing)
    rows = len(nan_rows[0])
    for i, leg in enumerate(answers):
        assert result.agreeing[leg] <= rows - sum(nan_rows[i])  # a NaN row is never agreement
    if result.agreed:
        assert not np.isnan(result.outputs["probabilities"]).any()


@FAST
@given(ballot=ballots(), data=st.data())
def test_the_order_of_the_legs_does_not_change_the_vote(
    ballot: tuple[dict[str, dict[str, Any]], VoteRule, list[list[bool]]], data: st.DataObject
) -> None:
    answers, rule, _ = ballot
    order = data.draw(st.permutations(list(answers)))
    first, second = vote(answers, rule), vote({leg: answers[leg] for leg in order}, rule)
    assert_same_vote(first, second)


def assert_same_vote(first: VoteResult, second: VoteResult) -> None:
    assert (first.agreed, first.reason) == (second.agreed, second.reason)
    assert first.dissenters == second.dissenters and first.agreeing == second.agreeing
    assert first.rows_without_quorum == second.rows_without_quorum
    assert set(first.outputs) == set(second.outputs)
    if first.agreed:  # without a quorum the tally (used only on agreement) follows leg order
        assert first.tally == second.tally
        assert first.outputs["label"].tolist() == second.outputs["label"].tolist()
        np.testing.assert_allclose(
            first.outputs["probabilities"], second.outputs["probabilities"], rtol=1e-6
        )


@FAST
@given(ballot=ballots(), noise=st.floats(0, 1e-4))
def test_a_unanimous_set_always_agrees(
    ballot: tuple[dict[str, dict[str, Any]], VoteRule, list[list[bool]]], noise: float
) -> None:
    answers, rule, _ = ballot
    first = next(iter(answers.values()))
    scores = np.nan_to_num(first["probabilities"], nan=0.5)
    same = {
        leg: {"label": first["label"].copy(), "probabilities": scores + np.float32(noise * i)}
        for i, leg in enumerate(answers)
    }
    for check in (False, True):
        rule = VoteRule(quorum=rule.quorum, check_numeric_with_labels=check)
        result = vote(same, rule)
        assert result.agreed and result.tally == f"{len(same)}/{len(same)}"
        assert result.dissenters == {} and result.rows_without_quorum == []
        assert result.outputs["label"].tolist() == first["label"].tolist()


# -- SLO windows -------------------------------------------------------------------------------

WINDOWS = [60.0, 300.0, 1800.0, FINE_HORIZON_S, 6 * 3600.0, 3 * DAY, 30 * DAY]
slo_steps = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.one_of(st.floats(0, 40), st.floats(0, 2 * DAY))),
        st.tuples(st.just("add"), st.tuples(st.booleans(), st.booleans())),
        # windows from one fine bucket up (the burn windows start at 5 min): a shorter one
        # still counts the whole current bucket
        st.tuples(
            st.just("count"), st.one_of(st.sampled_from(WINDOWS), st.floats(FINE_S, 30 * DAY))
        ),
    ),
    max_size=60,
)


@FAST
@given(steps=slo_steps)
def test_a_window_counts_exactly_the_events_of_its_buckets(
    steps: list[tuple[str, Any]],
) -> None:
    clock = FakeClock()
    window = SloWindow(clock, 30 * DAY)
    events: list[tuple[float, bool, bool]] = []  # wall time, good, degraded
    for kind, value in steps:
        if kind == "advance":
            clock.advance(value)
        elif kind == "add":
            window.add(good=value[0], degraded=value[1])
            events.append((clock.wall(), *value))
        else:
            now, span = clock.wall(), value
            counts = window.counts(span)
            step = FINE_S if span <= FINE_HORIZON_S else COARSE_S
            inside = [e for e in events if (e[0] // step) * step > now - span]
            assert counts.total == len(inside)
            assert counts.good == sum(e[1] for e in inside)
            assert counts.degraded == sum(e[2] for e in inside)
            # never an event older than the window; never one missed unless within a bucket
            # width of its start
            assert all(now - e[0] < span for e in inside)
            assert all(e in inside for e in events if now - e[0] < span - step)

"""The fault judge as a table: every row of `RULES` (and of docs/faults.md, "Who is at fault"
table, which must list the same rows) has cases, including the chaos-suite cases that shaped
the rules: two replicas starting to fail together, and a poison input."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from gateway.errors import UpstreamConnectError
from gateway.faults.classify import classify_error, classify_status
from gateway.faults.judge import (
    BROKEN_STREAK,
    RULES,
    SIGHTINGS_WINDOW_S,
    Fault,
    PoolFaultView,
    Refusal,
    Stage,
    disputed,
    input_is_evidence,
    judge,
)

NOW = 10_000.0
X, Y = "input-x", "input-y"  # two inputs' digests


Refused = dict[tuple[str, int], tuple[float, ...]]  # (input, status) -> refusal times


def pool(size: int, streak: int = 1, refused: Refused | None = None) -> PoolFaultView:
    return PoolFaultView(size, streak, NOW, refused or {})


def seen(*ages_s: float) -> tuple[float, ...]:
    """Refusal times, ``ages_s`` seconds ago."""
    return tuple(NOW - age for age in ages_s)


def r(replica: str, status: int, pool_name: str = "p", input_: str = X) -> Refusal:
    return Refusal(replica, pool_name, status, input_)


@dataclass(frozen=True)
class Case:
    row: str  # the README row this case is about
    about: str
    stage: Stage
    refusals: tuple[Refusal, ...]
    pools: dict[str, PoolFaultView]
    fault: Fault
    decides: str | None  # the row that decides (None: undecided)
    request: tuple[str, ...] = ()  # replicas named in the client's 4xx
    charged: tuple[str, ...] = ()
    open: tuple[str, ...] = ()
    max_attempts: int | None = None
    also_decides: tuple[str, ...] = ()  # other rows deciding on other refusals


ANSWERED = "answered elsewhere"
TWO_4XX = "same 4xx from two replicas"
THREE_5XX = "same 5xx from three replicas"
VOTE_5XX = "same 5xx from two replicas in a vote"
SOLE = "same 5xx to one input from a pool of one"
ALONE_5XX = "no second opinion on a 5xx"
ALONE_4XX = "no second opinion on a 4xx"
GOLDEN = "golden input refused"
P3 = {"p": pool(3)}

CASES = [
    Case(ANSWERED, "a black hole: its 4xx refuted by another replica's answer", Stage.ANSWERED,
         (r("r0", 400), r("r1", 500)), P3, Fault.REPLICAS, ANSWERED, charged=("r0", "r1")),
    Case(ANSWERED, "a vote's quorum refutes a leg's refusal", Stage.ANSWERED,
         (r("r3", 422, "b"),), {"b": pool(1)}, Fault.REPLICAS, ANSWERED, charged=("r3",)),
    Case(TWO_4XX, "the same 4xx from two replicas", Stage.REFUSED,
         (r("r0", 400), r("r1", 400)), P3, Fault.REQUEST, TWO_4XX, request=("r0", "r1")),
    Case(TWO_4XX, "two different 4xx are no agreement", Stage.REFUSED,
         (r("r0", 400), r("r1", 422)), P3, Fault.UNDECIDED, None, open=("r0", "r1")),
    Case(TWO_4XX, "one replica twice is one witness", Stage.REFUSED,
         (r("r0", 400), r("r0", 400)), P3, Fault.UNDECIDED, None, open=("r0", "r0")),
    Case(TWO_4XX, "two vote legs refusing alike", Stage.NO_QUORUM,
         (r("r0", 400, "a"), r("r3", 400, "b")), {"a": pool(3), "b": pool(3)}, Fault.REQUEST,
         TWO_4XX, request=("r0", "r3")),
    Case(THREE_5XX, "chaos: two of three replicas starting to fail together", Stage.REFUSED,
         (r("r0", 500), r("r1", 500)), P3, Fault.UNDECIDED, None, open=("r0", "r1")),
    Case(THREE_5XX, "chaos: a poison input, three replicas alike", Stage.REFUSED,
         (r("r0", 500), r("r1", 500), r("r2", 500)), P3, Fault.REQUEST, THREE_5XX,
         request=("r0", "r1", "r2")),
    Case(THREE_5XX, "a pool of two: both replicas are enough", Stage.REFUSED,
         (r("r0", 501), r("r1", 501)), {"p": pool(2)}, Fault.REQUEST, THREE_5XX,
         request=("r0", "r1")),
    Case(THREE_5XX, "two attempts allowed: both are enough", Stage.REFUSED,
         (r("r0", 500), r("r1", 500)), P3, Fault.REQUEST, THREE_5XX, request=("r0", "r1"),
         max_attempts=2),
    Case(THREE_5XX, "a broken pool (fails everything) is never asked wrong", Stage.REFUSED,
         (r("r0", 500), r("r1", 500), r("r2", 500)), {"p": pool(3, BROKEN_STREAK)},
         Fault.UNDECIDED, None, open=("r0", "r1", "r2")),
    Case(THREE_5XX, "the witnesses complete first decide", Stage.REFUSED,
         (r("r0", 500), r("r1", 400), r("r2", 500), r("r3", 400)), {"p": pool(4)},
         Fault.REQUEST, TWO_4XX, request=("r1", "r3")),
    Case(VOTE_5XX, "two legs' replicas alike", Stage.NO_QUORUM,
         (r("r0", 500, "a"), r("r3", 500, "b")), {"a": pool(3), "b": pool(1)}, Fault.REQUEST,
         VOTE_5XX, request=("r0", "r3")),
    Case(VOTE_5XX, "a leg of a broken pool is no witness", Stage.NO_QUORUM,
         (r("r0", 500, "a"), r("r3", 500, "b")), {"a": pool(3), "b": pool(1, BROKEN_STREAK)},
         Fault.UNDECIDED, None, open=("r0", "r3")),
    Case(VOTE_5XX, "the witnesses complete first decide", Stage.NO_QUORUM,
         (r("r0", 500, "a"), r("r1", 400, "b"), r("r2", 500, "c"), r("r3", 400, "d")),
         {n: pool(1) for n in "abcd"}, Fault.REQUEST, VOTE_5XX, request=("r0", "r2")),
    Case(SOLE, "poison mixed into good traffic: its third 500 blames the input",
         Stage.ATTEMPTS_ENDED, (r("r0", 500),), {"p": pool(1, 1, {(X, 500): seen(300, 20, 0)})},
         Fault.REQUEST, SOLE, request=("r0",), open=("r0",)),
    Case(SOLE, "its second 500 is not evidence enough: charged", Stage.ATTEMPTS_ENDED,
         (r("r0", 500),), {"p": pool(1, 1, {(X, 500): seen(20, 0)})}, Fault.REPLICAS, ALONE_5XX,
         charged=("r0",)),
    Case(SOLE, "earlier refusals outside the window do not count", Stage.ATTEMPTS_ENDED,
         (r("r0", 500),), {"p": pool(1, 1, {(X, 500): seen(SIGHTINGS_WINDOW_S + 1, 20, 0)})},
         Fault.REPLICAS, ALONE_5XX, charged=("r0",)),
    Case(SOLE, "another input's refusals do not count", Stage.ATTEMPTS_ENDED,
         (r("r0", 500),), {"p": pool(1, 1, {(Y, 500): seen(30, 20, 0), (X, 500): seen(0)})},
         Fault.REPLICAS, ALONE_5XX, charged=("r0",)),
    Case(SOLE, "a sole replica failing everything (in a row) is broken", Stage.ATTEMPTS_ENDED,
         (r("r0", 500),), {"p": pool(1, BROKEN_STREAK, {(X, 500): seen(2, 1, 0)})},
         Fault.REPLICAS, ALONE_5XX, charged=("r0",)),
    Case(SOLE, "only in a pool of one (a larger pool asks other replicas)", Stage.ATTEMPTS_ENDED,
         (r("r0", 500),), {"p": pool(2, 1, {(X, 500): seen(30, 20, 0)})}, Fault.REPLICAS,
         ALONE_5XX, charged=("r0",)),
    Case(ALONE_5XX, "nobody else could answer", Stage.ATTEMPTS_ENDED,
         (r("r0", 500), r("r1", 501)), P3, Fault.REPLICAS, ALONE_5XX, charged=("r0", "r1")),
    Case(ALONE_4XX, "the client gets the last 4xx; the 5xx is charged", Stage.ATTEMPTS_ENDED,
         (r("r0", 404), r("r1", 500), r("r2", 400)), P3, Fault.REQUEST, ALONE_4XX,
         request=("r2",), charged=("r1",), open=("r0", "r2"), also_decides=(ALONE_5XX,)),
    Case(GOLDEN, "a known-good input refused", Stage.GOLDEN,
         (r("r0", 400),), {}, Fault.REPLICAS, GOLDEN, charged=("r0",)),
    Case(GOLDEN, "even with a 503", Stage.GOLDEN, (r("r0", 503),), {}, Fault.REPLICAS, GOLDEN,
         charged=("r0",)),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"{c.row}: {c.about}" for c in CASES])
def test_the_judges_table(case: Case) -> None:
    verdict = judge(case.stage, case.refusals, case.pools, case.max_attempts)
    assert verdict.fault is case.fault
    assert tuple(e.replica_id for e in verdict.request) == case.request
    assert tuple(e.replica_id for e, _ in verdict.charged) == case.charged
    assert tuple(e.replica_id for e in verdict.open) == case.open
    decided = {rule.name for _, rule in verdict.charged}
    if verdict.rule is not None:
        decided.add(verdict.rule.name)
    assert decided == ({case.decides, *case.also_decides} if case.decides else set())


def test_every_row_has_a_case_that_it_decides() -> None:
    assert {c.row for c in CASES} == {rule.name for rule in RULES}
    assert {c.decides for c in CASES} - {None} == {rule.name for rule in RULES}


def test_a_charge_says_why() -> None:
    verdict = judge(Stage.ANSWERED, [r("r0", 400)])
    [(_, rule)] = verdict.charged
    assert rule.reason.format(status=400, by="r1") == "answered 400 where r1 answered the request"


def test_rows_on_working_pools_need_the_pools_record() -> None:
    with pytest.raises(KeyError, match="no record of pool 'p'"):
        judge(Stage.REFUSED, [r("r0", 500), r("r1", 500)], {})


@pytest.mark.parametrize(
    ("status", "is_disputed"),
    [
        (200, False),
        (400, True),
        (404, True),
        (422, True),
        (500, True),
        (501, True),
        (502, False),
        (503, False),
        (504, False),
        (505, False),
    ],
)
def test_which_answers_are_disputed(status: int, is_disputed: bool) -> None:
    assert disputed(classify_status("r", status, 0.01)) is is_disputed


def test_inputs_are_named_only_where_a_row_counts_requests_to_one_input() -> None:
    assert input_is_evidence(1, 500) and input_is_evidence(1, 501)
    assert not input_is_evidence(1, 400) and not input_is_evidence(2, 500)


def test_failures_without_a_status_are_the_replicas_at_once() -> None:
    assert not disputed(classify_error("r", UpstreamConnectError("refused"), 0.01))


FAULTS_PAGE = Path(__file__).parents[3] / "docs" / "faults.md"


def _readme_rows() -> list[list[str]]:
    section = FAULTS_PAGE.read_text()
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:]]


def test_the_readme_lists_the_same_rows_in_the_same_order() -> None:
    rows = _readme_rows()
    assert [row[0] for row in rows] == [rule.name for rule in RULES]
    for row, rule in zip(rows, RULES, strict=True):
        _, when, answers, witnesses, verdict = row
        assert when == ", ".join(s.value for s in sorted(rule.stages, key=list(Stage).index))
        assert answers == rule.statuses.value, rule.name
        assert verdict.startswith(rule.fault.value), rule.name
        assert ("kept open" in verdict) is rule.keep_open, rule.name
        assert ("working" in witnesses) is rule.working, rule.name
        if rule.witnessed:
            assert re.match(rf"{rule.witnesses}\b", witnesses), rule.name
            assert rule.counted.value in witnesses, rule.name
        else:
            assert witnesses == "–", rule.name


def test_the_readme_states_the_judges_numbers() -> None:
    section = FAULTS_PAGE.read_text()
    assert f"{BROKEN_STREAK} error answers in a row" in section
    assert f"{SIGHTINGS_WINDOW_S:.0f} s" in section

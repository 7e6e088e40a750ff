"""The correctness bench's run kinds: which carry audits, an SLO and the vote; its window."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from loadtests.bench_correctness import Answers, config
from loadtests.stack import Proc


def _proc(name: str) -> Proc:
    # the config reads a replica's URL only
    return cast(Proc, SimpleNamespace(url=f"http://127.0.0.1:1/{name}"))


def _digits(run: str) -> dict[str, Any]:
    mlp = [_proc(f"mlp-{i}") for i in range(3)]
    digits: dict[str, Any] = config(mlp, _proc("svm"), _proc("forest"), run, 2)["models"]["digits"]
    return digits


def test_the_plain_fault_run_is_the_plain_route_with_no_audit_and_no_slo() -> None:
    assert _digits("plain-fault") == _digits("off") == {"pool": "digits-mlp", "timeout_ms": 1000}
    watched = _digits("quarantine")
    assert watched["audit"] == {"rate": 0.05} and "burn_policy" not in watched
    assert "burn_policy" in _digits("vote")


def test_the_window_counts_wrong_answers_among_the_answered_in_its_seconds() -> None:
    answers = Answers(began=0.0)
    answers.rows += [(1.0, 200, True, False, 0.01), (30.0, 200, True, False, 0.01)]
    answers.rows += [(31.0, 200, False, False, 0.01), (32.0, 503, False, False, 0.01)]
    last = answers.window(25.0, 40.0)
    assert (last["sent"], last["failed"], last["wrong"]) == (3, 1, 1)
    assert last["wrong_rate"] == 0.5 and last["failed_by_status"] == {503: 1}

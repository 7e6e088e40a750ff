"""The chaos package's parts without processes: events, checks, shapes, scenarios, reports.

Fast: fake answers and made-up events; only one test runs the ONNX models for the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadtests.chaos import gwstate, plots
from loadtests.chaos.checks import check_answer, parse_labels
from loadtests.chaos.events import Event, EventLog, first_event_time, read_events
from loadtests.chaos.objectives import evaluate
from loadtests.chaos.reference import UNKNOWN, Reference, encode, majority, make_samples
from loadtests.chaos.report import write_scenario, write_suite
from loadtests.chaos.runner import PASS, Result, _steps
from loadtests.chaos.scenarios import FULL, SCENARIOS, SMOKE, SMOKE_SCENARIO, Fault
from loadtests.chaos.shapes import plan, step_users, step_windows
from loadtests.chaos.stats import Run, Window


def answer(labels: list[int], model: str = "digits") -> bytes:
    n = len(labels)
    return orjson.dumps(
        {
            "model_name": model,
            "outputs": [
                {"name": "label", "shape": [n], "datatype": "INT64", "data": labels},
                {
                    "name": "probabilities",
                    "shape": [n, 10],
                    "datatype": "FP32",
                    "data": [0.1] * 10 * n,
                },
            ],
        }
    )


class FakeReference(Reference):
    def __init__(self) -> None:  # no split, no ONNX: fixed labels
        self._table = {"digits": [1, 2, 3], "fallback/small": [1, 9, 3], "digits-vote": [1, -1, 3]}

    def labels(self, name: str) -> np.ndarray:
        return np.array(self._table[name], dtype=np.int64)


def no_headers(key: str) -> str | None:
    return None


def test_event_lines_round_trip_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    log = EventLog(path)
    events = [Event(1.5, 2.25, "digits", 3, 200, degraded=True), Event(2.0, 9.0, "d", 1, 0, "x")]
    for e in events:
        log.write(e)
    assert first_event_time(path) == 1.5  # the first event is flushed at once
    log.close()
    with path.open("ab") as out:
        out.write(b'{"t": 3')  # a writer killed mid-line
    assert list(read_events(path)) == events
    assert first_event_time(tmp_path / "missing") is None


def test_a_valid_right_answer() -> None:
    verdict = check_answer(200, answer([1, 3]), no_headers, "digits", [0, 2], FakeReference())
    assert (verdict.error, verdict.wrong, verdict.degraded) == ("", False, False)


def test_a_wrong_label_is_wrong_not_an_error() -> None:
    verdict = check_answer(200, answer([1, 4]), no_headers, "digits", [0, 2], FakeReference())
    assert (verdict.error, verdict.wrong) == ("", True)
    assert "expected [1, 3]" in verdict.detail


def test_a_fallback_answer_is_checked_against_the_fallback_and_marked_degraded() -> None:
    headers = {"x-degraded": "no replica", "x-served-by": "fallback/small"}
    verdict = check_answer(200, answer([9]), headers.get, "digits", [1], FakeReference())
    assert (verdict.error, verdict.wrong, verdict.degraded) == ("", False, True)


def test_rows_without_a_majority_are_not_checked() -> None:
    verdict = check_answer(200, answer([7]), no_headers, "digits-vote", [1], FakeReference())
    assert not verdict.wrong


@pytest.mark.parametrize(
    ("status", "body", "error", "detail"),
    [
        (0, b"", "transport", "no HTTP answer"),
        (503, b'{"error": "no replica"}', "status", "HTTP 503: no replica"),
        (500, b"Internal Server Error", "status", "without a JSON error body"),
        (200, b"not json", "schema", "not JSON"),
        (200, answer([1], model="other"), "schema", "model_name"),
        (200, answer([1, 2]), "schema", "label shape"),
        (200, answer([11]), "schema", "class numbers"),
    ],
)
def test_bad_answers(status: int, body: bytes, error: str, detail: str) -> None:
    verdict = check_answer(status, body, no_headers, "digits", [0], FakeReference())
    assert verdict.error == error
    assert detail in verdict.detail


def test_nested_label_data_is_accepted() -> None:
    body = orjson.dumps(
        {
            "model_name": "m",
            "outputs": [{"name": "label", "shape": [2], "datatype": "INT64", "data": [[4], [5]]}],
        }
    )
    assert parse_labels(body, "m", 2) == [4, 5]


def test_majority_needs_more_than_half() -> None:
    votes = [np.array([1, 1, 2]), np.array([1, 2, 3]), np.array([0, 2, 4])]
    assert majority(votes).tolist() == [1, 2, UNKNOWN]


def test_reference_uses_the_onnx_models_or_the_true_labels(tmp_path: Path) -> None:
    missing = Reference(models_dir=tmp_path, fallback_dir=tmp_path)
    assert np.array_equal(missing.labels("digits"), missing.y_true)
    assert missing.sources["digits"] == "true labels"
    assert missing.expected("digits", "fallback/nothing", [0, 1]) == missing.y_true[:2].tolist()


def test_reference_from_onnx_agrees_mostly_with_the_truth(models_dir: Path) -> None:
    reference = Reference(models_dir=models_dir)
    labels = reference.labels("digits-vote")
    assert reference.sources["digits-vote"] == "onnx"
    assert (labels == reference.y_true).mean() > 0.95


def test_samples_carry_their_rows_in_a_v2_body() -> None:
    x = np.arange(5 * 64, dtype=np.float32).reshape(5, 64)
    samples = make_samples(x, [1, 3], 20, seed=0)
    assert all(len(s.rows) in (1, 3) for s in samples)
    body = orjson.loads(samples[0].body)["inputs"][0]
    assert body["shape"] == [len(samples[0].rows), 64]
    assert orjson.loads(encode(x, [2]))["inputs"][0]["data"][0] == 128.0


def test_shapes() -> None:
    assert plan("steady", 3.0, users=8, spawn_rate=None, run_time_s=10) == (8, 8.0)
    assert plan("steady", 10.0, users=8, spawn_rate=None, run_time_s=10) is None
    assert step_users(16) == [4, 8, 12, 16]
    step = {"users": 4, "spawn_rate": 1.0, "run_time_s": None, "steps": [1, 2], "step_s": 5.0}
    assert plan("step", 4.9, **step) == (1, 20.0)  # type: ignore[arg-type]
    assert plan("step", 5.0, **step) == (2, 20.0)  # type: ignore[arg-type]
    assert plan("step", 10.0, **step) is None  # type: ignore[arg-type]
    spike = [plan("spike", t, users=16, spawn_rate=None, run_time_s=10) for t in (1, 5, 7, 10)]
    assert [s[0] if s else None for s in spike] == [4, 16, 4, None]
    assert step_windows(4, [1, 2], 5.0, None) == [(1, 0.0, 5.0), (2, 5.0, 10.0)]
    with pytest.raises(ValueError, match="unknown shape"):
        plan("zigzag", 0, users=1, spawn_rate=1, run_time_s=1)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_fault_fits_in_its_timing(scenario: object) -> None:
    for timing in (FULL, SMOKE):
        faults: list[Fault] = scenario.timeline(timing)  # type: ignore[attr-defined]
        assert faults
        for fault in faults:
            assert timing.before <= fault.at < timing.before + timing.fault
            assert fault.until is None or fault.at < fault.until <= timing.before + timing.fault


def test_catalogue_names_are_unique_and_the_smoke_scenario_needs_nothing_new() -> None:
    names = [s.name for s in SCENARIOS]
    assert len(names) == len(set(names)) >= 8
    assert next(s for s in SCENARIOS if s.name == SMOKE_SCENARIO).needs is None


def test_steps_are_in_time_order() -> None:
    faults = [Fault("a", 1.0, (), 5.0, ()), Fault("b", 3.0, ())]
    assert _steps(faults) == [(1.0, 0, False), (3.0, 1, False), (5.0, 0, True)]


def test_reports_and_the_suite_table(tmp_path: Path) -> None:
    scenario = SCENARIOS[0]
    events = [Event(100 + i / 50, 5.0, "digits", 1, 200) for i in range(500)]
    run = Run.of(events, 1000, 100.0)
    windows = [Window(3.0, 6.0, "kill")]
    result = Result(
        scenario,
        FULL,
        scenario.objective,
        smoke=False,
        status=PASS,
        run=run,
        windows=windows,
        log=[(3.0, "kill")],
        verdict=evaluate(scenario.objective, run, windows),
    )
    readme = write_scenario(result, tmp_path / scenario.name)
    assert "**PASS**" in readme.read_text()
    assert (tmp_path / scenario.name / "seconds.csv").read_text().count("\n") == 11
    assert (tmp_path / scenario.name / "timeline.png").exists() == plots.available()
    skipped = Result(
        SCENARIOS[-1],
        FULL,
        SCENARIOS[-1].objective,
        smoke=False,
        status="not run",
        note="needs redis (check-config: nope)",
    )
    write_scenario(skipped, tmp_path / SCENARIOS[-1].name)
    table = write_suite(tmp_path).read_text()
    assert f"| {scenario.name} |" in table and "**PASS**" in table
    assert "not run: needs redis |" in table
    assert json.loads((tmp_path / scenario.name / "result.json").read_text())["sent"] == 500


def test_gateway_state_summary_names_replicas_out_of_service() -> None:
    state = {
        "state_store": {"backend": "redis", "degraded": True, "last_error": "refused"},
        "pools": [
            {
                "name": "p",
                "panic": True,
                "replicas": [
                    {"id": "a", "healthy": True, "breaker": {"state": "closed"}},
                    {"id": "b", "healthy": False, "breaker": {"state": "open"}, "ejected": True},
                    {"id": "c", "quarantined": True, "quarantine_reason": "dissent"},
                ],
            }
        ],
    }
    lines = gwstate.summarize(state)
    assert lines[0].startswith("pool p: panic")
    assert "b: unhealthy, breaker open, ejected (outlier)" in lines
    assert "c: quarantined (dissent)" in lines
    assert "last error: refused" in lines[-1]
    assert gwstate.summarize({"pools": []})[0].startswith("every replica healthy")
    assert gwstate.snapshot("http://127.0.0.1:9")[0].startswith("/admin/state unreadable")

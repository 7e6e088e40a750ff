"""No measured figures or history in the product's code: they go to docs/measured.md and the
generated performance page (figures) and to CHANGELOG.md (history). A docstring says what and
why, and names the benchmark that measures the point."""

from __future__ import annotations

import re

from tests.support.processes import REPO_ROOT

FIGURE = re.compile(r"\d[\d,.]*\s?(?:µs|us|ms|ns)\b")
HISTORY = re.compile(
    r"\bused to (?:show|be|take|cost|answer)\b|\bwas \d|\ba later issue\b|\bat first\b"
    r"|\(was "
)


def offending_lines() -> list[str]:
    found = []
    for path in sorted((REPO_ROOT / "gateway").rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FIGURE.search(line) or HISTORY.search(line):
                found.append(f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}")
    return found


def test_no_figures_or_history_in_the_gateways_code() -> None:
    assert offending_lines() == []


def test_the_patterns_catch_what_they_are_for() -> None:
    for text in ("costs ≈ 25 µs a request", "took 2.6 ms", "was 256 KiB at first",
                 "`/status` used to show", "a later issue's rollouts", "(was 14-16×)"):  # fmt: skip
        assert FIGURE.search(text) or HISTORY.search(text), text
    for text in ("timeout_ms: int", "TIMER_SLACK_S = 0.001", "first try", "the 1 s chore"):
        assert not (FIGURE.search(text) or HISTORY.search(text)), text

"""No measured figures or history in the product's code: they go to docs/measured.md and the
generated performance page (figures) and to CHANGELOG.md (history). A docstring says what and
why, and names the benchmark that measures the point.

The patterns catch durations, sizes, shares, ratios (``14.4×``, ``~2x``) and phrases of history
("the old ...", "used to ...", "at first"), in every module of the gateway, the replica server
and the protocol package (generated protobuf code aside). A figure split over two lines
("46" at one line's end, "% above" at the next one's start) is caught too: each line is also
searched joined to the next, and a match that straddles the join counts. A definition is not a
measurement: `ALLOWED` lists the few, each with its reason, by file and by a phrase of its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from tests.support.processes import REPO_ROOT

ROOTS = ("gateway", "replicas", "v2proto")
FIGURE = re.compile(
    # durations
    r"\d[\d,.]*\s?(?:µs|us|ms|ns)\b"
    # sizes
    r"|\d[\d,.]*\s?(?:[KMGT]i?B|kB)\b"
    # shares, not a format spec ({x:.2%})
    r"|\d[\d,.]*\s?%(?![}\w(])"
    # ratios: 14.4×, 2× (not a shape, 1×3×224, nor a product, 3 × (4/3))
    r"|\d[\d,.]*\s?×(?!\s*[\d(])"
    # ratios: ~2x (not 0x1f, 5xx, {n:032x})
    r"|(?<![\w.])(?!0x)\d[\d.]*x(?![\w{}])"
)
HISTORY = re.compile(
    r"\bused to (?:show|be|take|cost|answer)\b|\bwas \d|\ba later issue\b|\bat first\b"
    r"|\(was |\bthe old\b|\bthe commit that\b|\bin the commit\b"
)
# (file, a phrase of the line that holds the match) -> why it is no measured figure or history
ALLOWED = {
    ("gateway/config/rollout.py", "(1.96: 95 %)"): "z = 1.96 defines the 95 % interval",
    ("gateway/config/server.py", "one read (256 KiB)"): "the read size, in the reference",
    ("gateway/config/server.py", "from 64 MiB to 1 GiB"): "the default's clamp, in the reference",
    ("gateway/memory/inflight_bytes.py", "from 64 MiB to 1 GiB"): "the clamp its last line applies",
    ("gateway/telemetry/catalog.py", "256 B ... 64 MiB"): "the byte buckets' range",
    ("gateway/telemetry/history_buffers.py", "5 % wider"): "the sketch's growth, by definition",
    ("gateway/slo/correctness.py", "at a 95 % confidence level"): "the interval's definition",
    ("gateway/slo/correctness.py", "of its stated 95 %:"): "the interval's definition",
    ("gateway/slo/correctness.py", "two-sided 95 % interval"): "the interval's definition",
    ("gateway/slo/correctness.py", "The 95 % interval of"): "the interval's definition",
    ("gateway/slo/engine.py", "95 % interval"): "the interval's definition",
    ("gateway/slo/engine.py", "95 % Wilson score"): "the interval's name in /slo",
    ("gateway/telemetry/catalog.py", "bounds of its 95 %"): "the interval's definition",
    ("gateway/telemetry/history_buffers.py", "within ±2.5 %"): "the error bound that growth gives",
}


@dataclass(frozen=True)
class Found:
    path: str
    number: int
    line: str
    match: str
    context: str  # the line, or the line joined to the next where the match straddles them

    def __str__(self) -> str:
        return f"{self.path}:{self.number}: {self.line.strip()}  [{self.match}]"


def continued(line: str) -> str:
    """A line as it continues the one before: without its indent and comment mark."""
    return line.strip().lstrip("#").strip()


def matches(text: str) -> Iterator[re.Match[str]]:
    yield from FIGURE.finditer(text)
    yield from HISTORY.finditer(text)


def found_in(path: str, text: str) -> Iterator[Found]:
    lines = text.splitlines()
    for index, line in enumerate(lines):
        for match in matches(line):
            yield Found(path, index + 1, line, match.group(), line)
        if index + 1 < len(lines):
            head = line.rstrip()
            joined = f"{head} {continued(lines[index + 1])}"
            for match in matches(joined):
                if match.start() < len(head) < match.end():
                    yield Found(path, index + 1, line, match.group(), joined)


def allowed(found: Found) -> bool:
    return any(
        path == found.path and found.match in phrase and phrase in found.context
        for path, phrase in ALLOWED
    )


def scanned() -> Iterator[tuple[str, str]]:
    for root in ROOTS:
        for path in sorted((REPO_ROOT / root).rglob("*.py")):
            if "_pb2" not in path.name:  # generated (v2proto/grpc/generate.sh)
                yield path.relative_to(REPO_ROOT).as_posix(), path.read_text(encoding="utf-8")


def everything_found() -> list[Found]:
    return [found for path, text in scanned() for found in found_in(path, text)]


def test_no_figures_or_history_in_the_products_code() -> None:
    offending = [str(found) for found in everything_found() if not allowed(found)]
    assert offending == [], "\n".join(offending)


def test_every_allowance_is_still_needed() -> None:
    used = {
        (path, phrase)
        for found in everything_found()
        for path, phrase in ALLOWED
        if path == found.path and found.match in phrase and phrase in found.context
    }
    assert sorted(ALLOWED.keys() - used) == []


def caught(text: str) -> bool:
    return any(True for _ in found_in("sample.py", text))


def test_the_patterns_catch_what_they_are_for() -> None:
    for text in (
        "costs ≈ 25 µs a request",
        "took 2.6 ms",
        "was 256 KiB at first",
        "`/status` used to show",
        "a later issue's rollouts",
        "(was 14-16×)",
        "left the gateway 46\n    % above its baseline",
        "held 192 MB",
        "at 14.4×)",
        "~2x np.array's speed",
        "the old adapter",
        "(the figures are in the commit that added this)",
        "a 602 KB image",
        "a page of 15 MiB\n    # held",
        "87 % of rows",
        "a 15\n    MB reply",
    ):
        assert caught(text), text


def test_the_patterns_leave_what_is_no_figure() -> None:
    for text in (
        "timeout_ms: int",
        "TIMER_SLACK_S = 0.001",
        "first try",
        "the 1 s chore",
        "{value:.2%}",
        "0x{int(reasons):x}",
        "5xx",
        "1×3×224×224 FP32",
        "3 × (4/3)",
        "base × 2^(n-1)",
        "the outgoing gateway",
        "its 64\n    rows",
    ):
        assert not caught(text), text


def test_a_split_figure_is_reported_at_the_line_it_starts() -> None:
    found = list(found_in("sample.py", '"""\nleft it 46\n% above its baseline.\n"""'))
    assert [(f.number, f.match) for f in found] == [(2, "46 %")]

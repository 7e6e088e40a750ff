"""Load reports from answers' ``endpoint-load-metrics``: believed within bounds, refused whole
(and counted) otherwise, read once per distinct text."""

from __future__ import annotations

import tracemalloc

import pytest

from gateway.policies.load_report import (
    CACHED,
    MAX_CHARS,
    LoadReport,
    LoadReports,
    parse_report,
)
from v2proto.load import text_report


def test_our_replicas_report_reads_back() -> None:
    text = text_report([("queue", 3), ("inflight", 4), ("DCGM_FI_DEV_GPU_TEMP", 71.5)])
    assert parse_report(text) == LoadReport(3.0, 4.0, (("DCGM_FI_DEV_GPU_TEMP", 71.5),))
    # ORCA's own fields beside ours are allowed and not used; spaces around are fine
    other = parse_report("TEXT cpu_utilization=0.3,  named_metrics.queue=2 ,rps_fractional=10")
    assert other == LoadReport(2.0)
    assert parse_report("TEXT named_metrics.inflight=6") == LoadReport(6.0, 6.0)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("TEXT named_metrics.queue=-1", "absurd"),
        ("TEXT named_metrics.queue=nan", "absurd"),
        ("TEXT named_metrics.queue=inf", "absurd"),
        ("TEXT named_metrics.queue=1e308", "absurd"),
        ("TEXT named_metrics.queue=1, named_metrics.DCGM_FI_DEV_GPU_TEMP=9000", "absurd"),
        ("TEXT named_metrics.queue=1, named_metrics.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0.5", "absurd"),
        ("TEXT queue=1", "absurd"),  # not a named metric: a forgery of ORCA's fields
        ("TEXT named_metrics.queue=1, named_metrics.queue=0", "malformed"),
        ("TEXT named_metrics.queue=three", "malformed"),
        ("TEXT named_metrics.queue", "malformed"),
        ("TEXT =1", "malformed"),
        ('JSON {"named_metrics": {"queue": 1}}', "not_text_form"),
        ("", "not_text_form"),
        ("TEXT named_metrics.other=1", "no_queue"),
        ("TEXT " + ", ".join(f"named_metrics.m{i}=1" for i in range(40)), "too_many_names"),
        ("TEXT named_metrics.queue=1" + " " * MAX_CHARS, "too_long"),
    ],
)
def test_forged_malformed_huge_or_absurd_reports_are_refused_whole(text: str, why: str) -> None:
    assert parse_report(text).refused == why
    reports = LoadReports()
    assert reports.read(text) is None
    assert reports.refused == {why: 1} and reports.taken == 0


def test_a_text_is_parsed_once_and_the_cache_stays_bounded() -> None:
    reports = LoadReports()
    first = reports.read("TEXT named_metrics.queue=2")
    assert first is not None and reports.read("TEXT named_metrics.queue=2") is first
    assert reports.taken == 2
    huge = "TEXT " + ", ".join(f"named_metrics.m{i}=1" for i in range(3000))
    tracemalloc.start()
    try:
        for i in range(20 * CACHED):  # a replica sending a new text every time
            reports.read(f"TEXT named_metrics.queue={i % 1000}, named_metrics.x{i}=1")
        for _ in range(2000):  # and thousands of names, huge, over and over
            reports.read(huge)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(reports._known) <= CACHED
    assert held < CACHED * 2 * MAX_CHARS  # the cache, not what was sent
    assert reports.refused["too_long"] == 2000

"""How a soak is judged, on made-up samples: the warm-up by default, and judging a stored run
again without running it."""

from __future__ import annotations

import json
from pathlib import Path

from loadtests import soak


def _record(path: Path, rss: list[int], *, seconds: float = 900.0) -> Path:
    step = seconds / (len(rss) - 1)
    samples = [[i * step, i * 1_000, value] for i, value in enumerate(rss)]
    record = {
        "door": "grpc",
        "model": "digits",
        "concurrency": 16,
        "seconds": seconds,
        "warmup_s": 300.0,
        "requests": samples[-1][1],
        "failed": 0,
        "errors": {},
        "samples": samples,
    }
    path.write_text(json.dumps(record))
    return path


def test_the_default_warm_up_is_ten_minutes_or_two_thirds_of_a_shorter_run() -> None:
    assert soak.default_warmup_s(3600) == 600
    assert soak.default_warmup_s(900) == 600
    assert soak.default_warmup_s(120) == 80


def test_a_ring_filling_for_ten_minutes_then_flat_passes_and_a_steady_slope_fails(
    tmp_path: Path,
) -> None:
    limits = soak.parser().parse_args([])  # the CLI's defaults: 4 B/request, 5 MB
    # 16 samples over 15 minutes: +100 KB a sample for the first ten, then flat
    filling = [140_000_000 + 100_000 * min(i, 10) for i in range(16)]
    verdict = soak.rejudge(_record(tmp_path / "flat.json", filling), None, limits)
    assert verdict.warmup_s == 600
    assert verdict.passed, verdict.why
    assert abs(verdict.steady_bytes_per_request) < 1e-6
    # the same run judged from five minutes in counts the ring as growth
    early = soak.rejudge(_record(tmp_path / "early.json", filling), 300, limits)
    assert not early.passed and "bytes/request" in early.why[0]
    # 10 bytes a request all the way: fails whatever the warm-up
    leak = [140_000_000 + 10 * 1_000 * i for i in range(16)]
    verdict = soak.rejudge(_record(tmp_path / "leak.json", leak), None, limits)
    assert not verdict.passed
    assert round(verdict.steady_bytes_per_request) == 10
    assert round(verdict.bytes_per_request) == 10


def test_a_one_off_step_in_the_judged_window_passes_and_a_steady_leak_fails(
    tmp_path: Path,
) -> None:
    # what CI saw: RSS flat but for one 0.9 MB step mid-window, 1,000 requests between samples
    limits = soak.parser().parse_args(["--max-bytes-per-request", "100"])
    step = [140_000_000 + (900_000 if i >= 8 else 0) for i in range(16)]
    verdict = soak.rejudge(_record(tmp_path / "step.json", step, seconds=150), 0, limits)
    assert verdict.passed, verdict.why
    assert verdict.bytes_per_request > 80  # a fitted line reads the step as a trend
    # 160 bytes a request (the leak the CI soak was written for): in every span, so it fails
    leak = [140_000_000 + 160 * 1_000 * i for i in range(16)]
    verdict = soak.rejudge(_record(tmp_path / "leak.json", leak, seconds=150), 0, limits)
    assert not verdict.passed
    assert round(verdict.steady_bytes_per_request) == 160

"""The payload sweep's verdicts: ratios to nginx from one run, 200s only, the targets' bounds."""

from __future__ import annotations

from collections import Counter

import numpy as np

from loadtests.bench_payloads import Row, render, targets
from loadtests.loadgen import LoadResult
from loadtests.payloads import payload, sweep_payloads


def _result(ok: int, other: dict[int, int] | None = None, latency_s: float = 0.01) -> LoadResult:
    statuses = Counter({200: ok, **(other or {})})
    total = sum(statuses.values())
    return LoadResult(1.0, [latency_s] * total, [0.0] * total, [200] * total, statuses)


def test_the_sweep_covers_four_sizes_in_both_encodings() -> None:
    sizes = {(p.label, p.encoding): len(p.body) for p in sweep_payloads()}
    assert set(sizes) == {
        (s, e) for s in ("300B", "60KB", "600KB", "6MB") for e in ("binary", "json")
    }
    assert 250 < sizes["300B", "binary"] < 500 and 600_000 < sizes["600KB", "binary"] < 610_000
    assert 1.0e6 < sizes["600KB", "json"] < 1.4e6 and 6.0e6 < sizes["6MB", "binary"] < 6.1e6
    binary = next(p for p in sweep_payloads() if p.encoding == "binary")
    header = int(binary.headers["inference-header-content-length"])
    assert binary.body[:header].endswith(b"}") and len(binary.body) - header == 256


def test_a_target_passes_only_within_every_bound_and_counts_200s_only() -> None:
    image = payload("600KB", "binary", "image-gap", "image", np.zeros((1, 3, 224, 224), "f4"))
    nginx = Row("nginx", image, 8, _result(100), 100.0)
    fast = Row("gateway", image, 8, _result(95, latency_s=0.011), 190.0)
    shed = Row("gateway", image, 8, _result(50, {503: 50}, latency_s=0.011), 190.0)
    assert targets([nginx, fast])[0].startswith("PASS 600KB binary")
    verdict = targets([nginx, shed])[0]  # as many answers, but half of them 503s
    assert verdict.startswith("MISS") and "throughput 50% of nginx" in verdict
    assert "50×503" in render([nginx, shed])
    assert targets([nginx])[0].endswith("not measured")

"""bench_scaling's CPU plan: a target on CPUs of its own, the load on the others."""

from __future__ import annotations

import os

from loadtests.bench_scaling import Pinning
from loadtests.scaling_table import Row, render
from loadtests.wrk_runner import WrkResult


def test_a_target_gets_the_first_cpus_it_needs_and_the_load_the_rest() -> None:
    pinning = Pinning(True, os.getpid(), cpus=[0, 1, 2, 3])
    assert pinning.split(1) == ([0], [1, 2, 3])
    assert pinning.split(2) == ([0, 1], [2, 3])


def test_a_target_that_needs_every_cpu_runs_unpinned_beside_the_load() -> None:
    pinning = Pinning(True, os.getpid(), cpus=[0, 1])
    assert pinning.split(2) == ([0, 1], [0, 1])
    assert pinning.split(8) == ([0, 1], [0, 1])


def test_no_pin_leaves_every_process_on_every_cpu() -> None:
    pinning = Pinning(False, os.getpid(), cpus=[0, 1, 2, 3])
    assert pinning.split(1) == ([0, 1, 2, 3], [0, 1, 2, 3])
    assert "no" in pinning.note()


def test_a_gateway_with_workers_shows_its_control_process_share_of_the_cpu() -> None:
    result = WrkResult(requests=1000, seconds=1.0, p50_ms=1.0, p99_ms=2.0)
    rows = [
        Row("gateway single", 16, result, 150.0),
        Row("gateway 1 worker", 16, result, 121.4, control_us=5.3),
    ]
    table = render(rows, [])
    assert "| gateway single | 16 | 1000 | 1.000 | 2.000 | 0 | 150 |" in table
    assert "| gateway 1 worker | 16 | 1000 | 1.000 | 2.000 | 0 | 121 (5 control) |" in table

"""bench_scaling's CPU plan: a target on CPUs of its own, the load on the others."""

from __future__ import annotations

import os

from loadtests.bench_scaling import Pinning


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

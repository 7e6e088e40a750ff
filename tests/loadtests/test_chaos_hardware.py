"""The hardware scenarios' parts: the kill comes when the injected ramp reaches shutdown, the
sensed config is one the gateway accepts, and the checks read drains against actions."""

from __future__ import annotations

import pytest

from gateway.config import parse_config
from loadtests.chaos import hardware as hw
from loadtests.chaos.cluster import Cluster
from loadtests.chaos.scenarios import BY_NAME, FULL, SENSED, SHUTDOWN_C, overheat
from replicas.accelerator_inject import InjectedReadings


def test_the_kill_comes_when_the_ramp_reaches_shutdown() -> None:
    ramp_fault, kill_fault = overheat(FULL)
    ramp = ramp_fault.begin[0]
    assert "temperature_ramp" in ramp.label and kill_fault.begin[0].label == "SIGKILL mlp-0"
    started = ramp_fault.at
    readings = InjectedReadings().merged(
        {"temperature_ramp": {"from": 70, "to": 100, "over_s": FULL.fault}}, started
    )
    assert readings.apply(None, kill_fault.at).temperature_c == pytest.approx(SHUTDOWN_C)


def test_the_sensed_cluster_config_is_valid_and_the_off_one_has_no_signals() -> None:
    sensed = parse_config(Cluster(SENSED, BY_NAME["gpu-overheat"].models).config())
    assert all(p.accelerator is not None for p in sensed.pools.values())
    off = BY_NAME["gpu-overheat-off"]
    plain = parse_config(Cluster(off.topology, off.models).config())
    assert all(p.accelerator is None for p in plain.pools.values())


def seen(drains: list[float], failed: float = 0.0) -> hw.Seen:
    log = [(5.0, "accelerator={...} on mlp-0"), (10.0, "SIGKILL mlp-0")]
    marks = [(t, "replica:mlp-0", "drain by hardware") for t in drains]
    return hw.Seen(0.0, log, marks, 1.0, {"mlp-0": failed} if failed else {})


def test_drained_before_needs_the_lead_and_no_failed_attempt_on_the_killed_one() -> None:
    check = hw.drained_before("SIGKILL", 1.0, "mlp-0")
    assert all(c.passed for c in check(seen([6.5])))  # a retry elsewhere is not the crash's
    assert not all(c.passed for c in check(seen([9.5])))  # 0.5 s: too late
    assert not all(c.passed for c in check(seen([6.5], failed=3)))
    assert not all(c.passed for c in check(seen([])))
    off = hw.no_drain_and_retries("mlp-0")
    assert all(c.passed for c in off(seen([], failed=2)))
    assert not all(c.passed for c in off(seen([], failed=0)))


def test_delta_keeps_what_grew() -> None:
    assert hw.delta({"a": 3.0, "b": 1.0}, {"a": 1.0, "b": 1.0}) == {"a": 2.0}


def test_drained_within_reads_the_first_drain_after_the_action() -> None:
    check = hw.drained_within("accelerator=", 0.5)
    assert check(seen([5.4]))[0].passed
    assert not check(seen([5.9]))[0].passed
    assert not check(seen([]))[0].passed

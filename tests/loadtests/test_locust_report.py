"""The locustfile's own report: how the answers were made and what the gateway's /metrics
counted behind Locust's back (retries, connect errors), printed last, after Locust's tables."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.gateway_counters import Sample, report
from tests.support.faults import inject_faults
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import REPO_ROOT, ReplicaProcess, start_replica

LOCUSTFILE = REPO_ROOT / "loadtests" / "locustfile.py"
RUN_S = 3
TIMEOUT_S = 120


def _attempts(outcome: str, replica: str = "r0") -> Sample:
    labels = {"model": "digits", "pool": "primary", "replica": replica, "outcome": outcome}
    return ("gateway_upstream_attempts_total", tuple(sorted(labels.items())))


def test_report_counts_what_each_counter_gained_over_the_run() -> None:
    retries: Sample = ("gateway_retries_total", (("model", "digits"),))
    before = {retries: 4.0, _attempts("success"): 100.0, _attempts("connect_error"): 1.0}
    after = {
        retries: 10.0,
        _attempts("success"): 250.0,
        _attempts("connect_error"): 5.0,
        _attempts("timeout", "r1"): 2.0,  # first seen after the start
        ("gateway_hedges_total", (("model", "digits"), ("result", "won"))): 3.0,
    }
    assert report(before, after) == [
        "Gateway /metrics over the run (what Locust's table does not show):",
        "  retries sent 6, refused by the retry budget 0; hedges 3",
        "  upstream attempts 156: success 150; connect_error 4, timeout 2",
    ]


@pytest.fixture
def flaky_stack(models_dir: Path) -> Iterator[GatewayProcess]:
    """Two replicas, one answering 503 to half its requests: the gateway retries them."""
    model = models_dir / "digits-mlp.onnx"
    replicas: list[ReplicaProcess] = []
    try:
        for _ in range(2):
            replicas.append(start_replica(model, name="digits-mlp", enable_faults=True))
        inject_faults(replicas[0].url, error_rate=0.5)
        gateway = start_gateway(pool_config(replicas))
        try:
            yield gateway
        finally:
            gateway.cleanup()
    finally:
        for replica in replicas:
            replica.cleanup()


@pytest.mark.integration
def test_locust_ends_with_the_answers_and_the_gateways_retries(
    flaky_stack: GatewayProcess,
) -> None:
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "-u",
        "4",
        "-r",
        "40",
        "-t",
        f"{RUN_S}s",
        "--host",
        flaky_stack.url,
        "--only-summary",
        "--stop-timeout",
        "2",
        "--rate",
        "20",
        "--no-reference",
        "DigitsUser",
    ]
    done = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    output = done.stdout  # as a terminal shows it: Locust logs its tables to stderr
    assert "Response time percentiles" in output, output
    tail = output[output.rindex("Response time percentiles") :]
    last = tail.strip().splitlines()[-7:]  # the very end: after every table of Locust's
    assert last[0] == last[-1] == "=" * 100, tail
    assert last[1] == "Answers (successes) by how they were made:"
    assert last[2].startswith("  digits: ") and "plain" in last[2]
    assert last[3] == "Gateway /metrics over the run (what Locust's table does not show):"
    retried = int(last[4].split("retries sent ")[1].split(",")[0])
    assert retried > 0, last  # the flaky replica's 503s, retried on the other: unseen by Locust
    assert "; connect_error " in last[5] and "server_error" in last[5], last

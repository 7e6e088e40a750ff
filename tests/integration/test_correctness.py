"""Correctness as an SLO with real replica processes and a real gateway: audits find the
replica that answers wrong, it is quarantined; with quarantine out of reach, the model is
served by a vote while its correctness SLO burns, and back on its single route after.

The gateway is ``gateway serve`` with two data-plane workers: the requests, their audits and
the votes run in the workers, and the control process decides from both workers' shipped
verdicts (the correctness SLO, the suspects and their quarantine, the escalation that every
worker then applies from its snapshot). The runs are small (a few hundred requests, eight at
a time) and every wait is bounded.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from replicas.dataset import load_split
from tests.integration.conftest import StartGateway, StartReplicas
from tests.integration.test_voting import Answer, classify, stack
from tests.support.faults import clear_faults_async, inject_faults_async
from tests.support.gateway import GatewayProcess
from tests.support.processes import ReplicaProcess

pytestmark = pytest.mark.integration
BOUND_S = 60.0  # the longest any phase may take on a busy machine
WORKERS = 2


def config(
    mlp: list[ReplicaProcess], svm: ReplicaProcess, forest: ReplicaProcess, **digits: Any
) -> dict[str, Any]:
    def pool(model: str, replicas: list[ReplicaProcess], prefix: str) -> dict[str, Any]:
        return {
            "model": model,
            "replicas": [{"id": f"{prefix}{i}", "url": r.url} for i, r in enumerate(replicas)],
        }

    return {
        "server": {"workers": WORKERS},
        "pools": {
            "mlp": pool("digits-mlp", mlp, "mlp-"),
            "svm": pool("digits-svm", [svm], "svm-"),
            "forest": pool("digits-forest", [forest], "forest-"),
        },
        "models": {
            "digits": {
                "pool": "mlp",
                "timeout_ms": 2000,
                "slos": [{"name": "right", "kind": "correctness", "objective": 0.99}],
                **digits,
            }
        },
    }


def get(gateway: GatewayProcess, path: str) -> dict[str, Any]:
    """A control-plane read: it waits for both workers' shipped batches (the barrier)."""
    return dict(httpx.get(f"{gateway.url}{path}", trust_env=False, timeout=10).json())


def correctness(gateway: GatewayProcess) -> dict[str, Any]:
    (slo,) = get(gateway, "/slo")["models"]["digits"]["slos"]
    return dict(slo)


def replicas(gateway: GatewayProcess) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for p in get(gateway, "/admin/state")["pools"] for r in p["replicas"]}


def escalated(answer: Answer) -> bool:
    return "escalated" in answer[2].get("x-vote", "")


async def test_audits_name_the_corrupting_replica_and_it_is_quarantined(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    mlp, svm, forest = stack(start_replicas)
    audit = {"rate": 0.5, "suspect_min_votes": 30, "suspect_window": 60, "suspect_ratio": 0.2}
    gateway = start_gw(config(mlp, svm, forest, audit=audit))
    assert len(gateway.worker_pids()) == WORKERS
    _, x_test, _, _ = load_split()
    await inject_faults_async(mlp[0].url, corrupt_rate=1.0)
    deadline = time.monotonic() + BOUND_S
    states = replicas(gateway)
    while not states["mlp-0"]["quarantined"] and time.monotonic() < deadline:
        answers = await classify(gateway.url, "digits", x_test[:100])
        assert all(status == 200 for status, _, _ in answers)
        assert all("x-vote" not in headers for _, _, headers in answers)
        states = replicas(gateway)
    assert states["mlp-0"]["quarantined"], "mlp-0 was not quarantined in time"
    assert "audits" in states["mlp-0"]["quarantine_reason"]
    assert not states["mlp-1"]["quarantined"] and not states["mlp-2"]["quarantined"]
    slo = correctness(gateway)
    assert slo["sources"]["audit"]["wrong"] > 0
    low, high = slo["wrong_rate_interval"]
    assert 0 < low <= slo["wrong_rate"] <= high
    audits = get(gateway, "/admin/state")["models"]["digits"]["audits"]["outcomes"]
    assert audits["wrong"] > 0 and audits["agreed"] > 0


async def test_a_burning_correctness_slo_is_served_by_a_vote_until_it_stops(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    mlp, svm, forest = stack(start_replicas)
    never = {"rate": 0.5, "suspect_min_votes": 1_000_000, "suspect_window": 1_000_000}
    escalation = {"vote": {"enabled": True, "k": 3, "recover_s": 3}}
    pools = ["mlp", "svm", "forest"]
    digits = {"audit": never, "vote_pools": pools, "burn_policy": escalation}
    gateway = start_gw(config(mlp, svm, forest, **digits))
    assert len(gateway.worker_pids()) == WORKERS
    _, x_test, _, y_test = load_split()
    await inject_faults_async(mlp[0].url, corrupt_rate=1.0)
    # voted by every worker: each applies the control's decision from its snapshot
    deadline = time.monotonic() + BOUND_S
    answers = await classify(gateway.url, "digits", x_test[:100])
    while not all(map(escalated, answers)) and time.monotonic() < deadline:
        answers = await classify(gateway.url, "digits", x_test[:100])
    assert all(map(escalated, answers)), "digits was not voted in time"
    state = get(gateway, "/admin/state")["models"]["digits"]["escalation"]
    assert state["engaged"] and "correctness burn" in state["reason"]
    assert state["vote_pools"] == pools
    voted = await classify(gateway.url, "digits", x_test[:200])
    truth = y_test[:200]
    wrong = [i for i, (status, label, _) in enumerate(voted) if (status, label) != (200, truth[i])]
    assert len(wrong) <= 10  # the vote's own accuracy (the three versions' misses), not mlp-0's
    assert all(map(escalated, voted))
    await clear_faults_async(mlp[0].url)
    deadline = time.monotonic() + BOUND_S
    answers = await classify(gateway.url, "digits", x_test[:50])
    while any("x-vote" in h for _, _, h in answers) and time.monotonic() < deadline:
        answers = await classify(gateway.url, "digits", x_test[:50])
    assert all("x-vote" not in h for _, _, h in answers), "digits is still voted"
    history = get(gateway, "/slo")["models"]["digits"]["vote_escalation"]
    assert not history["engaged"] and history["changes"] == 2

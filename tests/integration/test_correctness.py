"""Correctness as an SLO with real replica processes and a real gateway: audits find the
replica that answers wrong, it is quarantined; with quarantine out of reach, the model is
served by a vote while its correctness SLO burns, and back on its single route after.

The gateway runs in one process (`tests.support.one_process`: the `Gateway` whole, as the
in-process tests run it), since this branch's data-plane workers cannot serve yet. The runs
are small (a few hundred requests, eight at a time) and every wait is bounded.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from replicas.dataset import load_split
from tests.integration.conftest import StartReplicas
from tests.integration.test_voting import classify, stack
from tests.support.faults import clear_faults_async, inject_faults_async
from tests.support.one_process import OneProcessGateway, start_one_process_gateway
from tests.support.processes import ReplicaProcess

pytestmark = pytest.mark.integration
BOUND_S = 60.0  # the longest any phase may take on a busy machine


def config(
    mlp: list[ReplicaProcess], svm: ReplicaProcess, forest: ReplicaProcess, **digits: Any
) -> dict[str, Any]:
    def pool(model: str, replicas: list[ReplicaProcess], prefix: str) -> dict[str, Any]:
        return {
            "model": model,
            "replicas": [{"id": f"{prefix}{i}", "url": r.url} for i, r in enumerate(replicas)],
        }

    return {
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


def get(gateway: OneProcessGateway, path: str) -> dict[str, Any]:
    return dict(httpx.get(f"{gateway.url}{path}", trust_env=False, timeout=5).json())


def correctness(gateway: OneProcessGateway) -> dict[str, Any]:
    (slo,) = get(gateway, "/slo")["models"]["digits"]["slos"]
    return dict(slo)


async def test_audits_name_the_corrupting_replica_and_it_is_quarantined(
    start_replicas: StartReplicas,
) -> None:
    mlp, svm, forest = stack(start_replicas)
    audit = {"rate": 0.5, "suspect_min_votes": 30, "suspect_window": 60, "suspect_ratio": 0.2}
    gateway = start_one_process_gateway(config(mlp, svm, forest, audit=audit))
    try:
        _, x_test, _, _ = load_split()
        await inject_faults_async(mlp[0].url, corrupt_rate=1.0)
        deadline = time.monotonic() + BOUND_S
        quarantined = False
        while not quarantined and time.monotonic() < deadline:
            answers = await classify(gateway.url, "digits", x_test[:100])
            assert all(status == 200 for status, _, _ in answers)
            assert all("x-vote" not in headers for _, _, headers in answers)
            states = {r["id"]: r for p in get(gateway, "/admin/state")["pools"]
                      for r in p["replicas"]}  # fmt: skip
            quarantined = bool(states["mlp-0"]["quarantined"])
        assert quarantined, "mlp-0 was not quarantined in time"
        assert "audits" in states["mlp-0"]["quarantine_reason"]
        assert not states["mlp-1"]["quarantined"] and not states["mlp-2"]["quarantined"]
        slo = correctness(gateway)
        assert slo["sources"]["audit"]["wrong"] > 0
        low, high = slo["wrong_rate_interval"]
        assert 0 < low <= slo["wrong_rate"] <= high
        audits = get(gateway, "/admin/state")["models"]["digits"]["audits"]["outcomes"]
        assert audits["wrong"] > 0 and audits["agreed"] > 0
    finally:
        gateway.cleanup()


async def test_a_burning_correctness_slo_is_served_by_a_vote_until_it_stops(
    start_replicas: StartReplicas,
) -> None:
    mlp, svm, forest = stack(start_replicas)
    never = {"rate": 0.5, "suspect_min_votes": 1_000_000, "suspect_window": 1_000_000}
    escalation = {"vote": {"enabled": True, "k": 3, "recover_s": 3}}
    gateway = start_one_process_gateway(
        config(mlp, svm, forest, audit=never, vote_pools=["mlp", "svm", "forest"],
               burn_policy=escalation)
    )  # fmt: skip
    try:
        _, x_test, _, y_test = load_split()
        await inject_faults_async(mlp[0].url, corrupt_rate=1.0)
        deadline = time.monotonic() + BOUND_S
        escalated: list[Any] = []
        while not escalated and time.monotonic() < deadline:
            answers = await classify(gateway.url, "digits", x_test[:100])
            escalated = [h for _, _, h in answers if "escalated" in h.get("x-vote", "")]
        assert escalated, "digits was not voted in time"
        state = get(gateway, "/admin/state")["models"]["digits"]["escalation"]
        assert state["engaged"] and "correctness burn" in state["reason"]
        assert state["vote_pools"] == ["mlp", "svm", "forest"]
        voted = await classify(gateway.url, "digits", x_test[:200])
        wrong = sum(1 for (s, label, _), y in zip(voted, y_test[:200], strict=True)
                    if s != 200 or label != y)  # fmt: skip
        assert wrong <= 10  # the vote's own accuracy (the three versions' misses), not mlp-0's
        assert all("escalated" in h.get("x-vote", "") for _, _, h in voted)
        await clear_faults_async(mlp[0].url)
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            answers = await classify(gateway.url, "digits", x_test[:50])
            if all("x-vote" not in h for _, _, h in answers):
                break
        else:
            pytest.fail("digits did not go back to its single route in time")
        history = get(gateway, "/slo")["models"]["digits"]["vote_escalation"]
        assert not history["engaged"] and history["changes"] == 2
    finally:
        gateway.cleanup()

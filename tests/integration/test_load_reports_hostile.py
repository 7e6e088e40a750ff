"""A replica that forges its load reports (negative, NaN, 1e308, thousands of names, another
form) behind ``gateway serve``: every answer is served, every report counted by why it was
refused and none believed (`tests.support.rogue_replica`'s ``forged-load`` mode)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.conftest import StartGateway
from tests.support.processes import ReplicaProcess, free_port, wait_until
from tests.support.rogue_replica import FORGED_LOAD
from tests.support.traffic import drive

pytestmark = pytest.mark.integration

ROUNDS = 6  # each forged report this many times


@pytest.fixture
def forger() -> Iterator[ReplicaProcess]:
    port = free_port()
    argv = [sys.executable, "-m", "tests.support.rogue_replica", "--port", str(port),
            "--mode", "forged-load"]  # fmt: skip
    proc = ReplicaProcess(argv, host="127.0.0.1", port=port, name="digits-mlp", version="1")
    try:
        wait_until(lambda: proc.ready() or not proc.alive(), 20, message=proc.log_text)
        assert proc.alive(), proc.log_text()
        yield proc
    finally:
        proc.cleanup()


def reports(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", trust_env=False, timeout=10).text
    (family,) = [
        f for f in text_string_to_metric_families(text) if f.name == "gateway_load_reports"
    ]
    return {s.labels["result"]: s.value for s in family.samples if s.name.endswith("_total")}


def admin_state(url: str) -> Any:
    return httpx.get(url + "/admin/state", trust_env=False, timeout=10).json()


async def test_forged_reports_are_counted_and_never_believed(
    forger: ReplicaProcess, start_gw: StartGateway
) -> None:
    config = {
        "pools": {"primary": {"model": "digits-mlp", "version": "1",
                              "replicas": [{"id": "r0", "url": forger.url}]}},
        "models": {"digits": {"pool": "primary"}},
    }  # fmt: skip
    gateway = start_gw(config)
    sent = ROUNDS * len(FORGED_LOAD)
    traffic = await drive(gateway.url, requests=sent, concurrency=1)
    assert traffic.failed == 0, traffic.answers[:2]
    # the workers' counts reach the control's /metrics with their next batch
    wait_until(lambda: sum(reports(gateway.url).values()) >= sent, 10, message="counted")
    counted = reports(gateway.url)
    assert counted.get("taken", 0) == 0, counted
    assert counted["absurd"] == 3 * ROUNDS  # negative, NaN, 1e308
    assert counted["too_long"] == ROUNDS and counted["not_text_form"] == ROUNDS
    state = await asyncio.to_thread(admin_state, gateway.url)
    (replica,) = state["pools"][0]["replicas"]
    assert replica["reported_queue"] is None  # nothing believed, nothing taken for zero

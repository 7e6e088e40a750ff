"""Load-aware balancing with real processes: a replica other clients load is passed over.

Three ``digits-mlp`` replicas behind ``gateway serve``; an outside client loads ``r0``
directly (32 at once) while the test sends 8 at once through the gateway. The gateway sees
``r0``'s queue only in what ``r0`` reports (its answers' ``endpoint-load-metrics``, and its
``/metrics`` scraped by the control process while the balancer sends it nothing). With
``load_aware`` on, ``r0`` gets a small share of the gateway's requests; with it off, the
gateway balances by its own outstanding requests only and keeps sending ``r0`` a share of
them. Shares are asserted, never latencies: the test must hold on a busy 2-core machine.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from loadtests.loadgen import LoadResult, closed_loop
from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.gateway import pool_config
from tests.support.processes import ReplicaProcess, wait_until
from tests.support.traffic import request_bodies

pytestmark = pytest.mark.integration

OUTSIDE = 32  # the outside client's requests at once, straight to r0
THROUGH = 8  # the test's, through the gateway
SECONDS = 6.0
MOST_REQUESTS = 200_000
# r0's queue is deep from the outside load: replicas answer it after a short wait (async,
# no thread held), so its queue is what waits, whatever the machine's speed
OUTSIDE_LATENCY_MS = 20
PATIENT = {"x-request-timeout-ms": "10000"}  # a busy machine's slow answer is not a failure


def state(url: str) -> dict[str, Any]:
    answer = httpx.get(url + "/admin/state", trust_env=False, timeout=10)
    answer.raise_for_status()
    doc: dict[str, Any] = answer.json()
    return doc


def replicas_state(url: str) -> dict[str, dict[str, Any]]:
    (pool,) = state(url)["pools"]
    return {r["id"]: r for r in pool["replicas"]}


def reported(gateway_url: str) -> dict[str, Any]:
    """r0 as the gateway's state shows it, once it reports a deep queue (bounded wait)."""
    seen: dict[str, Any] = {}

    def deep() -> bool:
        seen.update(replicas_state(gateway_url)["r0"])
        return (seen["reported_queue"] or 0) > 5

    wait_until(deep, SECONDS, interval=0.1, message=lambda: f"r0 to report a queue: {seen}")
    return seen


async def loaded(
    gateway_url: str, replica: ReplicaProcess
) -> tuple[LoadResult, LoadResult, dict[str, int], dict[str, Any] | None]:
    """The outside load on ``replica`` and the gateway's traffic at once; the gateway's
    requests each replica served meanwhile (by the gateway's counts), and r0 in the
    gateway's state while loaded (None: it never reported a deep queue)."""
    body = request_bodies(1)[0]
    before = {rid: r["requests"] for rid, r in replicas_state(gateway_url).items()}

    async def watch() -> dict[str, Any] | None:
        try:
            return await asyncio.to_thread(reported, gateway_url)
        except TimeoutError:
            return None

    outside, through, r0 = await asyncio.gather(
        closed_loop(replica.url, f"/v2/models/{replica.model_name}/infer", body,
                    concurrency=OUTSIDE, seconds=SECONDS + 1, max_requests=MOST_REQUESTS),
        closed_loop(gateway_url, "/v2/models/digits/infer", body, concurrency=THROUGH,
                    seconds=SECONDS, max_requests=MOST_REQUESTS, headers=PATIENT),
        watch(),
    )  # fmt: skip
    after = replicas_state(gateway_url)
    return outside, through, {rid: r["requests"] - before[rid] for rid, r in after.items()}, r0


def scrape(url: str) -> str:
    return httpx.get(url + "/metrics", trust_env=False, timeout=10).text


def slowed(replica: ReplicaProcess) -> None:
    """Each answer of ``replica`` waits ``OUTSIDE_LATENCY_MS`` (its requests queue up)."""
    from tests.support.faults import inject_faults

    inject_faults(replica.url, latency_ms=OUTSIDE_LATENCY_MS)


@pytest.mark.parametrize(("aware", "workers"), [(True, 1), (False, 1), (True, 2)])
async def test_a_replica_loaded_from_outside_gets_few_of_the_gateways_requests(
    start_replicas: StartReplicas, start_gw: StartGateway, aware: bool, workers: int
) -> None:
    """With two workers each sees only its own outstanding requests: the reports (its own
    answers', the other's through the control, the control's scrapes) still steer both."""
    replicas = start_replicas(3)
    config = pool_config(replicas, pool={"load_aware": aware, "health": {"interval_s": 0.5}})
    config["server"] = {"workers": workers}
    gateway = start_gw(config)
    slowed(replicas[0])
    outside, through, served, r0 = await loaded(gateway.url, replicas[0])
    assert sum(outside.statuses.values()) > 0 and set(outside.statuses) == {200}
    assert set(through.statuses) == {200} and not through.errors, (through.statuses, through.errors)
    total = sum(served.values())
    share = served["r0"] / total
    print(f"load_aware={aware}: r0 served {served['r0']} of {total} ({share:.1%})")
    if not aware:
        assert share > 0.03, served  # what the gateway cannot see, it keeps sending to
        assert r0 is None  # nothing read
        return
    assert share <= 0.03, served
    # the control's view said what r0 reported, and how long ago
    assert r0 is not None and r0["reported_age_s"] is not None, r0
    metrics = await asyncio.to_thread(scrape, gateway.url)
    assert 'gateway_replica_reported_age_seconds{pool="primary",replica="r0"}' in metrics

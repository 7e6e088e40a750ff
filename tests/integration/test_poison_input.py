"""A pool of one real replica and a poison input: the fault judge's pool-of-one row end to end.

The replica (`--enable-faults`, ``poison_value``) answers 500 to any request holding one value
and answers every other request, as a runtime that crashes on one input does. Mixed into good
traffic, the poison input must not take the replica out: it is charged for the first two such
requests only, and later ones are the request's 400, while every good request gets its 200. A
replica that 500s everything is still charged until it is out.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults_async
from tests.support.gateway import pool_config
from tests.support.traffic import request_bodies

pytestmark = pytest.mark.integration
POISON = 99.5  # never in the digits data (0..16)
INFER = "/v2/models/digits/infer"


def sole_replica(url: str) -> dict[str, Any]:
    state = httpx.get(f"{url}/admin/state", trust_env=False, timeout=5).json()
    [pool] = state["pools"]
    [replica] = pool["replicas"]
    return dict(replica)


def poisoned(body: bytes, request_id: str) -> bytes:
    request = orjson.loads(body)
    request["id"] = request_id  # its own id each time: still the same input
    request["inputs"][0]["data"][5] = POISON
    return orjson.dumps(request)


async def test_a_poison_input_in_good_traffic_leaves_a_sole_replica_serving(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    [replica] = start_replicas(1)
    gateway = start_gw(pool_config([replica]))
    await inject_faults_async(replica.url, poison_value=POISON)
    bodies = request_bodies(16)
    poison = bodies[0]
    good: list[int] = []
    refused: list[tuple[int, str]] = []
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as client:
        for i in range(60):
            response = await client.post(INFER, content=bodies[i % len(bodies)])
            good.append(response.status_code)
            if i % 3 == 2:  # one poison request after every three good ones
                response = await client.post(INFER, content=poisoned(poison, f"poison-{i}"))
                refused.append((response.status_code, response.json()["error"]))
    assert good == [200] * 60
    assert len(refused) == 20 and all(status >= 500 for status, _ in refused[:2])
    for status, error in refused[2:]:
        assert status == 400 and "as on earlier requests with the same input" in error, error
    state = sole_replica(gateway.url)
    assert state["failures"] == 2, state
    assert state["breaker"]["state"] == "closed" and not state["ejected"], state
    assert state["ejections"] == 0 and state["healthy"], state


async def test_a_sole_replica_failing_everything_is_still_charged_until_it_is_out(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    [replica] = start_replicas(1)
    gateway = start_gw(pool_config([replica]))
    await inject_faults_async(replica.url, error_rate=1.0)
    bodies = request_bodies(16)
    statuses: list[int] = []
    state = sole_replica(gateway.url)
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=10) as client:
        for i in range(30):  # bounded: out after five charges in a row
            response = await client.post(INFER, content=bodies[i % len(bodies)])
            statuses.append(response.status_code)
            state = sole_replica(gateway.url)
            if state["ejected"] or state["breaker"]["state"] == "open":
                break
    assert state["ejected"] or state["breaker"]["state"] == "open", (statuses, state)
    assert state["failures"] >= 5 and 400 not in statuses, (statuses, state)

"""``POST /admin/reload`` on a real gateway: a new model appears without a restart, a bad file
is refused with the reason, and traffic keeps flowing."""

from __future__ import annotations

import httpx
import pytest
import yaml

from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.gateway import pool_config
from tests.support.traffic import drive

pytestmark = pytest.mark.integration


async def test_reload_adds_a_model_and_refuses_a_bad_file(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    config = pool_config(replicas)
    gateway = start_gw(config)
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=30) as client:
        assert (await client.get("/v2/models/digits-too/ready")).status_code == 404

        config["models"]["digits-too"] = {"pool": "primary"}
        gateway.config_path.write_text(yaml.safe_dump(config))
        reloaded = await client.post("/admin/reload", json={})
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["models"] == ["digits", "digits-too"]
        traffic = await drive(gateway.url, requests=40, concurrency=4, model="digits-too")
        assert traffic.failed == 0

        gateway.config_path.write_text("models: {digits: {pool: nowhere}}")
        refused = await client.post("/admin/reload", json={})
        assert refused.status_code == 400 and "config not reloaded" in refused.json()["error"]
        assert (await drive(gateway.url, requests=40, concurrency=4)).failed == 0


async def test_reload_under_load_loses_no_request(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    config = pool_config(replicas)
    gateway = start_gw(config)
    statuses: list[int] = []

    async def reload() -> None:
        async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
            statuses.append((await client.post(f"{gateway.url}/admin/reload", json={})).status_code)

    traffic = await drive(gateway.url, requests=400, concurrency=8, events={100: reload})
    assert statuses == [200]
    assert traffic.failed == 0 and len(traffic.answers) == 400

"""The control plane on real gateway processes (issue 13): keyed, Host-checked, JSON-only
changes, protected mode, a reload that keeps what the gateway learned, secrets never shown."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.api.auth_failures import STEP_S
from tests.integration.conftest import StartGateway, StartReplicas
from tests.support.faults import inject_faults_async
from tests.support.gateway import GatewayProcess, pool_config, start_gateway
from tests.support.processes import REPO_ROOT, free_port, wait_until, wait_until_async
from tests.support.traffic import drive

pytestmark = pytest.mark.integration

ADMIN_KEY = "adm-Zq7Lr2Wx9Kp4Ty8Nv3Bc"
METRICS_KEY = "met-Hs5Fd1Jg6Qa0Mu2Xe7Ro"
REDIS_USERINFO_PW = "RedisUserinfoPw-4Ku9"
REDIS_QUERY_PW = "RedisQueryPw-8Pw3"
REPLICA_PW = "ReplicaUrlPw-2Vt6"
SECRETS = (ADMIN_KEY, METRICS_KEY, REDIS_USERINFO_PW, REDIS_QUERY_PW, REPLICA_PW)
KEYED = {
    "server": {"admin": {"key_env": "GW_TEST_ADMIN_KEY", "metrics_key_env": "GW_TEST_METRICS_KEY"}}
}
KEY_ENV = {"GW_TEST_ADMIN_KEY": ADMIN_KEY, "GW_TEST_METRICS_KEY": METRICS_KEY}
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
ATTACKER = "127.0.0.2"  # another loopback address: another client
GOLDEN = str(REPO_ROOT / "fallback_models" / "digits-golden.json")


@pytest.fixture
def keyed_gateway(start_replicas: StartReplicas) -> Iterator[GatewayProcess]:
    config = {**pool_config(start_replicas(1)), **KEYED}
    proc = start_gateway(config, env=KEY_ENV)
    yield proc
    proc.cleanup()


async def test_admin_routes_need_the_key_and_the_data_plane_does_not(
    keyed_gateway: GatewayProcess,
) -> None:
    async with httpx.AsyncClient(base_url=keyed_gateway.url, trust_env=False, timeout=30) as http:
        for path in ("/admin/state", "/status", "/slo", "/metrics", "/docs", "/openapi.json"):
            refused = await http.get(path)
            assert refused.status_code == 401, path
            assert "error" in refused.json() and refused.headers["www-authenticate"]
            assert (await http.get(path, headers=ADMIN)).status_code == 200, path
        scrape = {"authorization": f"Bearer {METRICS_KEY}"}
        assert (await http.get("/metrics", headers=scrape)).status_code == 200
        assert (await http.get("/admin/state", headers=scrape)).status_code == 401
        assert (await http.post("/admin/reload", headers=scrape, json={})).status_code == 401
        open_paths = (
            "/v2/health/live",
            "/v2/health/ready",
            "/v2",
            "/v2/models/digits",
            "/v2/models/digits/ready",
            "/v2/models/digits/config",
            "/v2/models/stats",
        )
        for path in open_paths:
            assert (await http.get(path)).status_code == 200, path
        assert (await http.post("/v2/repository/index")).status_code == 200
        assert (await drive(keyed_gateway.url, requests=10, concurrency=2)).failed == 0


async def test_a_flood_of_wrong_keys_from_one_address_leaves_the_operator_answered(
    keyed_gateway: GatewayProcess,
) -> None:
    """40 clients at 127.0.0.2 sending wrong keys without pause (once: their delayed 401s held
    every connection from the worker to the control process, and the operator's requests got
    503 after 2 s): the attacker gets delayed 401s, then 429s; meanwhile each of the
    operator's requests from 127.0.0.1 is answered 200 within 1 s."""
    wrong = {"authorization": f"Bearer {ADMIN_KEY}x"}
    seen: list[tuple[int, float]] = []

    async def attack(http: httpx.AsyncClient) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            answer = await http.get("/admin/state", headers=wrong)
            seen.append((answer.status_code, loop.time() - started))

    transport = httpx.AsyncHTTPTransport(
        local_address=ATTACKER, limits=httpx.Limits(max_connections=64)
    )
    url = keyed_gateway.url
    async with (
        httpx.AsyncClient(base_url=url, transport=transport, trust_env=False, timeout=30) as bad,
        httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as operator,
    ):
        flood = [asyncio.create_task(attack(bad)) for _ in range(40)]
        try:
            await wait_until_async(
                lambda: {401, 429} <= {status for status, _ in seen}, 10, message="401s and 429s"
            )
            for _ in range(10):
                async with asyncio.timeout(1.0):
                    answer = await operator.get("/admin/state", headers=ADMIN)
                assert answer.status_code == 200
            # the flood held throughout
            assert not any(task.done() for task in flood)
        finally:
            for task in flood:
                task.cancel()
            await asyncio.gather(*flood, return_exceptions=True)
    assert {status for status, _ in seen} == {401, 429}
    assert min(elapsed for status, elapsed in seen if status == 401) >= STEP_S


async def test_a_simple_cross_site_reload_is_415_and_a_foreign_host_421(
    keyed_gateway: GatewayProcess,
) -> None:
    async with httpx.AsyncClient(base_url=keyed_gateway.url, trust_env=False, timeout=30) as http:
        simple = {**ADMIN, "origin": "http://attacker.example", "content-type": "text/plain"}
        refused = await http.post("/admin/reload", content=b"{}", headers=simple)
        assert refused.status_code == 415 and "application/json" in refused.json()["error"]
        assert not any(h.startswith("access-control-") for h in refused.headers)
        rebound = await http.get("/admin/state", headers={**ADMIN, "host": "attacker.example"})
        assert rebound.status_code == 421 and "allowed_hosts" in rebound.json()["error"]
        data_plane = await http.get("/v2/health/ready", headers={"host": "attacker.example"})
        assert data_plane.status_code == 200  # the data plane answers under any Host
        reloaded = await http.post("/admin/reload", json={}, headers=ADMIN)
        assert reloaded.status_code == 200, reloaded.text


@pytest.mark.parametrize("command", ["serve", "up"])
def test_protected_mode_refuses_a_wildcard_bind_without_a_key(tmp_path: Path, command: str) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pools": {
                    "p": {"model": "m", "replicas": [{"id": "a", "url": "http://127.0.0.1:9"}]}
                },
                "models": {"d": {"pool": "p"}},
            }
        )
    )
    argv = [
        sys.executable,
        "-m",
        "gateway.cli",
        command,
        "--config",
        str(config),
        "--host",
        "0.0.0.0",
        "--port",
        str(free_port()),
        "--grpc-port",
        str(free_port()),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2, done.stderr
    assert "protected mode" in done.stderr and "server.admin.key_env" in done.stderr


async def test_a_reload_keeps_a_quarantine_and_the_slo_history(
    start_replicas: StartReplicas, start_gw: StartGateway
) -> None:
    replicas = start_replicas(2)
    golden = {"file": GOLDEN, "interval_s": 0.3, "quarantine_s": 600}
    slos = [{"name": "availability", "kind": "availability", "objective": 0.99}]
    config = pool_config(replicas, pool={"golden": golden}, slos=slos)
    gateway = start_gw(config)  # loopback, no key: anonymous admin, as `make run`
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=30) as http:

        async def replica_state(replica_id: str) -> dict[str, Any]:
            pools = (await http.get("/admin/state")).json()["pools"]
            return next(r for r in pools[0]["replicas"] if r["id"] == replica_id)

        async def availability() -> dict[str, Any]:
            slo: dict[str, Any] = (await http.get("/slo")).json()
            return dict(slo["models"]["digits"]["slos"][0])

        assert (await drive(gateway.url, requests=40, concurrency=4)).failed == 0
        await inject_faults_async(replicas[1].url, corrupt_rate=1.0)
        for _ in range(100):
            if (await replica_state("r1"))["quarantined"]:
                break
            await drive(gateway.url, requests=2, concurrency=1)
        before = await replica_state("r1")
        assert before["quarantined"], before
        events = (await availability())["events"]["total"]
        assert events >= 40

        reloaded = await http.post("/admin/reload", json={})
        assert reloaded.status_code == 200, reloaded.text
        carried = reloaded.json()["carried_over"]
        assert carried["replicas"] == ["primary/r0", "primary/r1"]
        assert carried["slos"] == ["digits/availability"]
        after = await replica_state("r1")
        assert after["quarantined"] and after["quarantine_reason"] == before["quarantine_reason"]
        assert after["quarantined_for_s"] > 500
        assert (await availability())["events"]["total"] >= events
        traffic = await drive(gateway.url, requests=40, concurrency=4)
        assert traffic.failed == 0
        assert {a.served_by for a in traffic.answers} == {"r0"}  # the wrong one stays out


async def test_secrets_never_shown(start_replicas: StartReplicas, tmp_path: Path) -> None:
    redis_url = f"redis://:{REDIS_USERINFO_PW}@127.0.0.1:{free_port()}/0?password={REDIS_QUERY_PW}"
    config = {
        **pool_config(start_replicas(1)),
        **KEYED,
        "state": {"backend": "redis", "redis_url": redis_url, "sync_interval_s": 0.2},
    }
    proc = start_gateway(config, env=KEY_ENV)
    shown: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=proc.url, trust_env=False, timeout=30) as http:
            wrong = {"authorization": f"Bearer {ADMIN_KEY}x"}  # near miss: must not be echoed
            for path in ("/admin/state", "/slo", "/status", "/metrics", "/openapi.json"):
                for headers in (ADMIN, wrong, {}):
                    answer = await http.get(path, headers=headers)
                    shown += [answer.text, str(answer.headers)]

            def degraded() -> bool:
                state = httpx.get(f"{proc.url}/admin/state", headers=ADMIN, trust_env=False)
                return bool(state.json()["state_store"].get("degraded"))

            wait_until(degraded, 10, message="the state store to report Redis down")
            state = (await http.get("/admin/state", headers=ADMIN)).json()["state_store"]
            assert state["store"]["url"].startswith("redis://:***@127.0.0.1:")
            assert "password=***" in state["store"]["url"]
            shown.append(str(state))
            bad = yaml.safe_load(proc.config_path.read_text())
            bad["pools"]["primary"]["replicas"][0]["url"] = f"http://u:{REPLICA_PW}@127.0.0.1:9"
            proc.config_path.write_text(yaml.safe_dump(bad))
            refused = await http.post("/admin/reload", json={}, headers=ADMIN)
            assert refused.status_code == 400 and "credentials" in refused.json()["error"]
            shown.append(refused.text)
            shown.append((await http.get("/slo", headers=ADMIN)).text)
    finally:
        proc.stop()
        shown.append(proc.log_path.read_text(errors="replace"))  # all it logged, to the end
        proc.cleanup()
    output = "\n".join(shown)
    assert "redis://" in output and "***" in output  # the URL was shown, masked
    for secret in SECRETS:
        assert secret not in output, secret

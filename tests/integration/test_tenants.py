"""Tenants on a real gateway process (issue 13): keys from a file and a variable, 401 and 429
as JSON with their headers, a tenant's in-flight bound held by a slow upload, a tenant's SLO
counting only its requests, and anonymous callers served where no key is required."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.integration.conftest import StartReplicas
from tests.support.gateway import GatewayProcess, pool_config, start_gateway

pytestmark = pytest.mark.integration

ACME = "acme-Tq4Wn8Zr2Lx6Pb0Vc"  # keys_file, max_in_flight 1
GLOBEX = "globex-Hd3Ks7Ym1Fj5Ru9"  # key_env, 2 requests then 1 per 5 s
BODY = orjson.dumps(
    {"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}]}
)
KEYED = "/v2/models/digits/infer"  # auth.require_key
OPEN = "/v2/models/open/infer"  # anonymous allowed


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture
def gateway(start_replicas: StartReplicas, tmp_path: Path) -> Iterator[GatewayProcess]:
    keys = tmp_path / "acme.keys"
    keys.write_text(f"# acme's keys\n{ACME}\nacme-retired-Jw2Gq8Sx4Nd\n")
    config = pool_config(
        start_replicas(1),
        auth={"require_key": True},
        slos=[
            {"name": "acme-only", "kind": "availability", "objective": 0.99, "tenant": "acme"},
            {"name": "everyone", "kind": "availability", "objective": 0.99},
        ],
    )
    config["models"]["open"] = {"pool": "primary"}
    config["tenants"] = {
        "acme": {"keys_file": str(keys), "max_in_flight": 1},
        "globex": {"key_env": "GW_TEST_GLOBEX_KEY", "rate_per_s": 0.2, "burst": 2},
    }
    proc = start_gateway(config, env={"GW_TEST_GLOBEX_KEY": GLOBEX})
    yield proc
    proc.cleanup()


async def slow_upload(port: int, key: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """An acme request whose body is half sent: it holds acme's one in-flight slot."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {KEYED} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n"
    )
    writer.write(head.encode() + BODY[:20])
    await writer.drain()
    return reader, writer


async def hold_acme_slot(
    http: httpx.AsyncClient, port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, httpx.Response]:
    """A slow upload holding acme's slot, and the 429 another acme request then gets.

    An upload whose head arrives while a probe is in flight is itself refused: start again.
    """
    for _ in range(50):
        reader, writer = await slow_upload(port, ACME)
        await asyncio.sleep(0.05)  # for the gateway to read the upload's head
        busy = await http.post(KEYED, content=BODY, headers=bearer(ACME))
        if busy.status_code == 429:
            return reader, writer, busy
        writer.close()
    raise AssertionError("a slow upload never held acme's in-flight slot")


def requests_by_tenant(metrics: str, model: str) -> dict[str, float]:
    """``gateway_requests_total`` of ``model``, summed per tenant."""
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        if line.startswith("gateway_requests_total{") and f'model="{model}"' in line:
            tenant = line.split('tenant="')[1].split('"')[0]
            counts[tenant] = counts.get(tenant, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


async def test_keys_limits_and_tenant_slos(gateway: GatewayProcess) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, trust_env=False, timeout=30) as http:
        # anonymous: served where no key is required, 401 where one is
        assert (await http.post(OPEN, content=BODY)).status_code == 200
        refused = await http.post(KEYED, content=BODY)
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.headers["content-type"] == "application/json"
        assert "API key" in refused.json()["error"]
        for path in (KEYED, OPEN):  # a wrong key is 401 even where none is required
            wrong = await http.post(path, content=BODY, headers=bearer("nobody-Zz9Zz9Zz9Zz9Zz"))
            assert wrong.status_code == 401 and wrong.json() == {"error": "unknown API key"}

        # globex: its burst, then 429 with the seconds until its next token
        started = time.monotonic()
        for _ in range(2):
            assert (await http.post(KEYED, content=BODY, headers=bearer(GLOBEX))).status_code == 200
        limited = await http.post(KEYED, content=BODY, headers=bearer(GLOBEX))
        elapsed = time.monotonic() - started  # refilling since the first token was taken
        assert limited.status_code == 429
        assert limited.headers["content-type"] == "application/json"
        # 1 token at 0.2/s: 5 s less what refilled meanwhile (a busy machine is slow here)
        assert max(1, math.ceil(5 - elapsed)) <= int(limited.headers["retry-after"]) <= 5
        assert "globex" in limited.json()["error"]

        # acme: one request in flight at a time; a slow upload holds the slot
        reader, writer, busy = await hold_acme_slot(http, gateway.port)
        assert busy.headers["retry-after"] == "1"
        assert busy.json() == {"error": "tenant 'acme' is at its bound of 1 requests in flight"}
        assert (await http.post(OPEN, content=BODY)).status_code == 200  # others still pass
        writer.write(BODY[20:])
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        writer.close()
        assert status_line.startswith(b"HTTP/1.1 200")
        retired_key = bearer("acme-retired-Jw2Gq8Sx4Nd")  # a second key of the file
        assert (await http.post(KEYED, content=BODY, headers=retired_key)).status_code == 200

        # the tenant SLO counts acme's answers only; the other counts every answer
        slos = {s["name"]: s for s in (await http.get("/slo")).json()["models"]["digits"]["slos"]}
        counted = requests_by_tenant((await http.get("/metrics")).text, "digits")
        assert set(counted) == {"acme", "globex", "anonymous"}
        assert counted["globex"] == 3 and counted["anonymous"] == 2  # the 401s
        assert counted["acme"] >= 3
        assert slos["acme-only"]["tenant"] == "acme"
        assert slos["acme-only"]["events"]["total"] == counted["acme"]
        assert slos["everyone"]["events"]["total"] == sum(counted.values())

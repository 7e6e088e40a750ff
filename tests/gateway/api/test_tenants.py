"""Tenants at the edge: keys to tenants (digests only), 401 and 429 as JSON, labels and SLOs."""

from __future__ import annotations

import hashlib
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.api.tenants import TenantKeys
from gateway.config import ConfigError, GatewayConfig, parse_config
from gateway.config.tenants import TenantConfig
from gateway.control.runtime import Gateway
from gateway.errors import Unauthorized
from tests.gateway.api.test_app import REQUEST, Upstream
from tests.gateway.fakes import reply

ACME = "acme-key-0123456789abcdef"
ACME_NEXT = "acme-next-0123456789abcdef"
GLOBEX = "globex-key-0123456789abcdef"


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "acme.keys"
    path.write_text(f"# rotation in progress\n{ACME}\n\n{ACME_NEXT}\n")
    return path


def test_keys_map_digests_to_tenants_and_keep_no_key(keys_file: Path) -> None:
    keys = TenantKeys.load(
        {
            "acme": TenantConfig(keys_file=str(keys_file)),
            "globex": TenantConfig(key_env="GLOBEX_KEY"),
            "anonymous": TenantConfig(max_in_flight=4),
        },
        {"GLOBEX_KEY": GLOBEX},
    )
    assert len(keys) == 3
    assert set(keys._names) == {
        hashlib.sha256(k.encode()).digest() for k in (ACME, ACME_NEXT, GLOBEX)
    }
    assert keys.tenant({"authorization": f"Bearer {ACME}"}) == "acme"
    assert keys.tenant({"authorization": f"bearer {ACME_NEXT}"}) == "acme"
    assert keys.tenant({"x-api-key": GLOBEX}) == "globex"
    assert keys.tenant({}) == "anonymous"


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer not-a-key-of-anyone-at-all"},
        {"authorization": f"Basic {ACME}"},
        {"authorization": "Bearer "},
        {"x-api-key": ACME + "x"},
    ],
)
def test_a_key_nobody_holds_is_401_and_never_quoted(headers: dict[str, str]) -> None:
    keys = TenantKeys.load({"acme": TenantConfig(key_env="K")}, {"K": ACME})
    with pytest.raises(Unauthorized) as refused:
        keys.tenant(headers)
    assert refused.value.status == 401
    assert refused.value.headers()["www-authenticate"].startswith("Bearer")
    assert ACME not in refused.value.message


def test_unreadable_or_shared_keys_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="tenant acme key file"):
        TenantKeys.load({"acme": TenantConfig(keys_file=str(tmp_path / "missing"))}, {})
    with pytest.raises(ConfigError, match="tenant acme key variable K"):
        TenantKeys.load({"acme": TenantConfig(key_env="K")}, {})
    with pytest.raises(ConfigError, match="shorter"):
        TenantKeys.load({"acme": TenantConfig(key_env="K")}, {"K": "short"})
    shared = {"acme": TenantConfig(key_env="A"), "globex": TenantConfig(key_env="B")}
    with pytest.raises(ConfigError, match="hold the same key") as error:
        TenantKeys.load(shared, {"A": ACME, "B": ACME})
    assert ACME not in str(error.value)


def config(tenants: dict[str, Any], **model: Any) -> GatewayConfig:
    replicas = [{"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"} for i in range(3)]
    return parse_config(
        {
            "pools": {"p": {"model": "digits-mlp", "version": "1", "replicas": replicas}},
            "models": {"digits": {"pool": "p", **model}},
            "tenants": tenants,
        }
    )


async def serve(cfg: GatewayConfig, upstream: Upstream) -> AsyncIterator[httpx.AsyncClient]:
    gateway = Gateway(cfg, transport=upstream, rng=random.Random(0))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    transport = httpx.ASGITransport(app=GatewayApp(gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        http.gateway = gateway  # type: ignore[attr-defined]
        yield http
    await gateway.stop()


@pytest.fixture
async def upstream() -> Upstream:
    transport = Upstream()
    transport.script(reply(200, orjson.dumps({"model_name": "digits-mlp", "outputs": []})))
    return transport


@pytest.fixture
async def keyed(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("ACME_KEY", ACME)
    monkeypatch.setenv("GLOBEX_KEY", GLOBEX)
    tenants = {
        "acme": {"key_env": "ACME_KEY", "rate_per_s": 0.5, "burst": 2},
        "globex": {"key_env": "GLOBEX_KEY"},
    }
    slos = [
        {"name": "acme-avail", "kind": "availability", "objective": 0.99, "tenant": "acme"},
        {"name": "all", "kind": "availability", "objective": 0.99},
    ]
    async for http in serve(config(tenants, auth={"require_key": True}, slos=slos), upstream):
        yield http


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_a_model_that_requires_a_key_answers_401_without_one(
    keyed: httpx.AsyncClient,
) -> None:
    for headers in ({}, bearer("unknown-key-0123456789abcdef")):
        response = await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == 'Bearer realm="gateway"'
        assert response.headers["content-type"] == "application/json"
        assert "key" in response.json()["error"]
    ok = await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(GLOBEX))
    assert ok.status_code == 200


async def test_a_tenant_over_its_rate_gets_429_with_retry_after_before_its_body_is_read(
    keyed: httpx.AsyncClient, upstream: Upstream
) -> None:
    for _ in range(2):  # the burst
        ok = await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(ACME))
        assert ok.status_code == 200
    sent = sum(map(len, upstream.calls.values()))
    refused = await keyed.post(
        "/v2/models/digits/infer", content=b"{not json", headers=bearer(ACME)
    )
    assert refused.status_code == 429  # not 400: the body was never read
    assert refused.headers["retry-after"] == "2"  # one token at 0.5/s
    assert "acme" in refused.json()["error"]
    assert sum(map(len, upstream.calls.values())) == sent
    other = await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(GLOBEX))
    assert other.status_code == 200  # another tenant's share is its own


async def test_tenant_slos_count_only_their_tenant_and_metrics_label_tenants(
    keyed: httpx.AsyncClient,
) -> None:
    await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(ACME))
    await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(GLOBEX))
    await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(GLOBEX))
    await keyed.post("/v2/models/digits/infer", json=REQUEST, headers=bearer("x" * 20))
    slos = {s["name"]: s for s in keyed.gateway.slo.to_json()["models"]["digits"]["slos"]}  # type: ignore[attr-defined]
    assert slos["acme-avail"]["tenant"] == "acme"
    assert slos["acme-avail"]["events"]["total"] == 1
    assert slos["all"]["events"]["total"] == 4
    body = (await keyed.get("/metrics")).text
    counts: dict[str, float] = {}  # per tenant, summed over replicas and codes
    for line in body.splitlines():
        if line.startswith("gateway_requests_total{"):
            tenant = line.split('tenant="')[1].split('"')[0]
            counts[tenant] = counts.get(tenant, 0.0) + float(line.rsplit(" ", 1)[1])
            assert tenant != "anonymous" or 'code="401"' in line  # the unknown key
    assert counts == {"acme": 1.0, "globex": 2.0, "anonymous": 1.0}


async def test_anonymous_still_works_where_no_key_is_required_but_a_wrong_key_does_not(
    upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_KEY", ACME)
    tenants = {"acme": {"key_env": "ACME_KEY"}, "anonymous": {"max_in_flight": 8}}
    async for http in serve(config(tenants), upstream):
        anonymous = await http.post("/v2/models/digits/infer", json=REQUEST)
        assert anonymous.status_code == 200
        keyed = await http.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(ACME))
        assert keyed.status_code == 200
        wrong = await http.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(GLOBEX))
        assert wrong.status_code == 401 and wrong.json() == {"error": "unknown API key"}
        assert http.gateway.tenants.limiters["anonymous"].in_flight == 0  # type: ignore[attr-defined]


async def test_no_tenants_configured_is_the_local_default(upstream: Upstream) -> None:
    async for http in serve(config({}), upstream):
        response = await http.post("/v2/models/digits/infer", json=REQUEST)
        assert response.status_code == 200


async def test_a_reload_rereads_tenant_keys_and_refuses_an_unreadable_file(
    upstream: Upstream, tmp_path: Path
) -> None:
    keys = tmp_path / "acme.keys"
    keys.write_text(f"{ACME}\n")
    path = tmp_path / "gateway.yaml"
    document = config({}).model_dump(mode="json", exclude_none=True)
    document["tenants"] = {"acme": {"keys_file": str(keys)}}
    document["models"]["digits"]["auth"] = {"require_key": True}
    path.write_text(orjson.dumps(document).decode())  # JSON is YAML
    gateway = Gateway(parse_config(document), transport=upstream, rng=random.Random(0))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    app = GatewayApp(gateway, config_path=str(path))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        keys.unlink()
        refused = await http.post("/admin/reload", json={})
        assert refused.status_code == 400 and "tenant acme key file" in refused.json()["error"]
        ok = await http.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(ACME))
        assert ok.status_code == 200  # the keys read at start still hold
        keys.write_text(f"{ACME_NEXT}\n")  # a rotation
        assert (await http.post("/admin/reload", json={})).status_code == 200
        old = await http.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(ACME))
        assert old.status_code == 401
        new = await http.post("/v2/models/digits/infer", json=REQUEST, headers=bearer(ACME_NEXT))
        assert new.status_code != 401  # (the reloaded gateway has no fake upstream to answer)
    await app.gateway.stop()
    await gateway.stop()

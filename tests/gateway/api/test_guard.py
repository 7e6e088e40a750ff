"""The control plane's gate on a stub app: Host (421), key (401), JSON-only changes (415)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.api.auth import ControlAccess, Gate, KeyRing
from gateway.api.guard import ControlPlaneGuard, allowed_hosts, gate_of, host_name
from gateway.api.responses import Receive, Scope, Send, send_json

ADMIN = "admin-key-0123456789abcdef"
METRICS = "metrics-key-0123456789abcdef"
KEY = {"authorization": f"Bearer {ADMIN}"}


async def stub(scope: Scope, receive: Receive, send: Send) -> None:
    await send_json(send, 200, {"path": scope["path"]})


def guard(hosts: tuple[str, ...] | None = None, anonymous: bool = False) -> ControlPlaneGuard:
    access = ControlAccess(KeyRing.of(ADMIN), KeyRing.of(METRICS), anonymous)
    return ControlPlaneGuard(stub, access, allowed_hosts(hosts, "127.0.0.1"))


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=guard())
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
        yield http


@pytest.mark.parametrize(
    ("path", "gate"),
    [
        ("/v2", Gate.OPEN),
        ("/v2/health/ready", Gate.OPEN),
        ("/v2/models/digits/infer", Gate.OPEN),
        ("/v2/repository/index", Gate.OPEN),
        ("/metrics", Gate.METRICS),
        ("/admin/state", Gate.ADMIN),
        ("/admin/reload", Gate.ADMIN),
        ("/status", Gate.ADMIN),
        ("/dashboard", Gate.PAGE),
        ("/dashboard/dashboard.js", Gate.PAGE),  # the page's files: no data in them either
        ("/dashboard/dashboard.css", Gate.PAGE),
        ("/dashboard/secrets.js", Gate.ADMIN),  # not one of its files: default deny
        ("/dashboard/", Gate.ADMIN),
        ("/slo", Gate.ADMIN),
        ("/docs", Gate.ADMIN),
        ("/openapi.json", Gate.ADMIN),
        ("/anything-added-later", Gate.ADMIN),  # default deny
        ("/v2x", Gate.ADMIN),
    ],
)
def test_gate_of(path: str, gate: Gate) -> None:
    assert gate_of(path) is gate


@pytest.mark.parametrize(
    ("header", "name"),
    [
        (b"127.0.0.1:8000", "127.0.0.1"),
        (b"LocalHost", "localhost"),
        (b"[::1]:8000", "[::1]"),
        (b"gw.example.:80", "gw.example"),
    ],
)
def test_host_name_drops_the_port(header: bytes, name: str) -> None:
    assert host_name(header) == name


def test_default_allowed_hosts() -> None:
    loopback = {"127.0.0.1", "localhost", "[::1]"}
    assert allowed_hosts(None, "0.0.0.0") == loopback
    assert allowed_hosts(None, "::") == loopback
    assert allowed_hosts(None, "10.0.0.5") == loopback | {"10.0.0.5"}
    assert allowed_hosts(None, "fd00::5") == loopback | {"[fd00::5]"}
    assert allowed_hosts(("gw.internal",), "0.0.0.0") == {"gw.internal"}


async def test_the_data_plane_is_open_under_any_host(client: httpx.AsyncClient) -> None:
    answer = await client.get("/v2/health/ready", headers={"host": "evil.example"})
    assert answer.status_code == 200


async def test_admin_needs_the_admin_key(client: httpx.AsyncClient) -> None:
    missing = await client.get("/admin/state")
    assert missing.status_code == 401 and "admin key" in missing.json()["error"]
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = await client.get("/admin/state", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401
    metrics_key = await client.get("/status", headers={"authorization": f"Bearer {METRICS}"})
    assert metrics_key.status_code == 401
    assert (await client.get("/admin/state", headers=KEY)).status_code == 200


async def test_the_dashboard_page_opens_without_a_key_but_its_data_does_not(
    client: httpx.AsyncClient,
) -> None:
    """The page holds no data (a browser opens it, then the page fetches with a key it is
    given); the Host is still checked, so a rebound name cannot even load it."""
    page = await client.get("/dashboard")
    assert page.status_code == 200  # the stub app behind the guard answered
    assert (await client.get("/admin/history")).status_code == 401
    assert (await client.get("/dashboard", headers={"host": "attacker.example"})).status_code == 421


async def test_metrics_takes_either_key(client: httpx.AsyncClient) -> None:
    assert (await client.get("/metrics")).status_code == 401
    for key in (ADMIN, METRICS):
        answer = await client.get("/metrics", headers={"authorization": f"Bearer {key}"})
        assert answer.status_code == 200


async def test_a_foreign_host_is_421_even_with_the_key(client: httpx.AsyncClient) -> None:
    for host in ("attacker.example", "attacker.example:8000", "127.0.0.1.nip.io"):
        answer = await client.get("/admin/state", headers={**KEY, "host": host})
        assert answer.status_code == 421, host
        assert "server.allowed_hosts" in answer.json()["error"]
    assert (await client.get("/admin/state", headers={**KEY, "host": "[::1]:1"})).status_code == 200


async def test_a_wildcard_allows_any_host() -> None:
    transport = httpx.ASGITransport(app=guard(("*",)))
    async with httpx.AsyncClient(transport=transport, base_url="http://10.1.2.3:8000") as http:
        assert (await http.get("/metrics", headers=KEY)).status_code == 200


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
async def test_a_state_change_takes_json_only(
    client: httpx.AsyncClient, content_type: str | None
) -> None:
    headers = {**KEY, "origin": "http://attacker.example"}
    if content_type is not None:
        headers["content-type"] = content_type
    answer = await client.post("/admin/reload", content=b"x", headers=headers)
    assert answer.status_code == 415 and "application/json" in answer.json()["error"]
    assert not any(h.startswith("access-control-") for h in answer.headers)


async def test_json_passes_and_no_cors_header_is_sent(client: httpx.AsyncClient) -> None:
    headers = {**KEY, "origin": "http://attacker.example"}
    answer = await client.post("/admin/reload", json={}, headers=headers)
    assert answer.status_code == 200
    assert not any(h.startswith("access-control-") for h in answer.headers)
    charset = {**KEY, "content-type": "Application/JSON; charset=utf-8"}
    assert (await client.post("/admin/reload", content=b"{}", headers=charset)).status_code == 200


async def test_anonymous_still_checks_host_and_content_type() -> None:
    transport = httpx.ASGITransport(app=guard(anonymous=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        assert (await http.get("/admin/state")).status_code == 200
        rebound = await http.get("/admin/state", headers={"host": "rebound.example"})
        assert rebound.status_code == 421
        text = {"content-type": "text/plain"}
        assert (await http.post("/admin/reload", content=b"", headers=text)).status_code == 415

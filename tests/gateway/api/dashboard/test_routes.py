"""The dashboard served by a real keyed `GatewayApp` in-process: the page, its files, headers."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.api.app import GatewayApp
from gateway.api.dashboard.assets import FILES, PAGE
from gateway.api.dashboard.routes import not_modified
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from tests.gateway.api.test_app import REPLY, Upstream
from tests.gateway.conftest import make_config
from tests.gateway.fakes import reply

ALICE = "alice-key-0123456789abcdef"
AS_ALICE = {"authorization": f"Bearer {ALICE}"}
SCRIPTS = [url for url in FILES if url.endswith(".js")]


@pytest.fixture
async def client(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv("ALICE_KEY", ALICE)
    doc = make_config().model_dump(mode="json", exclude_unset=True)
    doc["server"] = {"admin": {"operators": {"alice": {"key_env": "ALICE_KEY"}}}}
    upstream = Upstream()
    upstream.script(reply(200, REPLY))
    gateway = Gateway(parse_config(doc), transport=upstream, rng=random.Random(0))
    await gateway.start()
    transport = httpx.ASGITransport(app=GatewayApp(gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http
    await gateway.stop()


async def test_status_and_dashboard_are_one_page_under_its_policy(
    client: httpx.AsyncClient,
) -> None:
    dashboard = await client.get("/dashboard")  # no key: the page holds no data
    assert (await client.get("/status")).status_code == 401  # the same page, keyed
    status = await client.get("/status", headers=AS_ALICE)
    assert status.status_code == dashboard.status_code == 200
    assert status.content == dashboard.content == PAGE.body
    for answer in (status, dashboard):
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        assert answer.headers["cache-control"] == "no-store"
        assert answer.headers["x-content-type-options"] == "nosniff"
    directives = dict(
        d.strip().split(" ", 1) for d in status.headers["content-security-policy"].split(";")
    )
    assert directives["default-src"] == "'none'" and directives["connect-src"] == "'self'"
    assert directives["script-src"] == "'self'"  # no inline script, no eval
    assert directives["frame-ancestors"] == "'none'" and directives["img-src"] == "data:"


async def test_the_files_open_without_a_key_with_their_types_and_etags(
    client: httpx.AsyncClient,
) -> None:
    for url, asset in FILES.items():
        answer = await client.get(url)
        assert answer.status_code == 200, url
        assert answer.content == asset.body
        assert answer.headers["content-type"] == asset.content_type
        assert answer.headers["cache-control"] == "no-cache"
        assert answer.headers["etag"] == asset.etag
        assert answer.headers["x-content-type-options"] == "nosniff"
    unknown = await client.get("/dashboard/secrets.js")  # default deny: keyed, then 404
    assert unknown.status_code == 401
    missing = await client.get("/dashboard/secrets.js", headers=AS_ALICE)
    assert missing.status_code == 404 and "error" in missing.json()
    foreign = await client.get(SCRIPTS[0], headers={"host": "attacker.example"})
    assert foreign.status_code == 421


async def test_a_file_the_browser_holds_is_a_304(client: httpx.AsyncClient) -> None:
    url, asset = next(iter(FILES.items()))
    held = await client.get(url, headers={"if-none-match": asset.etag})
    assert held.status_code == 304 and held.content == b""
    assert held.headers["etag"] == asset.etag and held.headers["cache-control"] == "no-cache"
    stale = await client.get(url, headers={"if-none-match": '"another-version"'})
    assert stale.status_code == 200 and stale.content == asset.body


@pytest.mark.parametrize(
    ("header", "held"),
    [
        (None, False),
        ('"abc"', True),
        ('W/"abc"', True),
        ('"x", "abc"', True),
        ("*", True),
        ('"abcd"', False),
        ("abc", False),
    ],
)
def test_not_modified(header: str | None, held: bool) -> None:
    assert not_modified(header, '"abc"') is held


async def test_the_scripts_draw_the_control_plane(client: httpx.AsyncClient) -> None:
    code = "".join([(await client.get(url)).text for url in SCRIPTS])
    for endpoint in ("/admin/state", "/admin/history", "/admin/fleet", "/admin/rollouts", "/slo"):
        assert endpoint in code, endpoint
    page = (await client.get("/dashboard")).text + code
    assert "True" not in page and "False" not in page  # words, not Python's booleans

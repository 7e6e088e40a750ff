"""A reload is all or nothing; a draining gateway says so on every readiness endpoint.

A reload that fails (a missing file, an unknown fallback, a gateway that fails to start)
answers JSON 400 with the reason, leaves the running gateway in place and stops whatever the
new one had started: the probe tasks running after are exactly those running before.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.api.app import GatewayApp
from gateway.config import load_config
from gateway.control.runtime import Gateway
from gateway.errors import BadRequest, Conflict
from tests.gateway.api.test_app import REPLY, REQUEST, Upstream
from tests.gateway.fakes import reply
from tests.support.processes import REPO_ROOT

GOLDEN = str(REPO_ROOT / "fallback_models" / "digits-golden.json")


def config(**model: Any) -> dict[str, Any]:
    replicas = [{"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"} for i in range(2)]
    pool = {"model": "digits-mlp", "version": "1", "replicas": replicas, "golden": {"file": GOLDEN}}
    return {"pools": {"p": pool}, "models": {"digits": {"pool": "p", **model}}}


def probe_tasks() -> list[str]:
    return sorted(
        t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith(("probe:", "golden:"))
    )


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[GatewayApp]:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config(fallback={"model": "digits-logreg"})))
    upstream = Upstream()
    upstream.script(reply(200, REPLY))
    gateway = Gateway(load_config(path), transport=upstream, rng=random.Random(0))
    await gateway.start()
    for replica in gateway.registry.replicas():
        replica.healthy = True
    app = GatewayApp(gateway, str(path))
    yield app
    await app.gateway.stop()


def rewrite(app: GatewayApp, data: dict[str, Any]) -> None:
    assert app._config_path is not None
    Path(app._config_path).write_text(yaml.safe_dump(data))


async def test_a_reload_naming_a_missing_golden_file_changes_nothing(
    app: GatewayApp, tmp_path: Path
) -> None:
    before, old = probe_tasks(), app.gateway
    assert before == ["golden:p", "probe:r0", "probe:r1"]
    broken = config(fallback={"model": "digits-logreg"})
    broken["pools"]["p"]["golden"]["file"] = "missing.json"
    rewrite(app, broken)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        refused = await http.post("/admin/reload", json={})
    assert refused.status_code == 400
    assert refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert error.startswith("config not reloaded:")
    assert f"pools.p.golden.file: no such file: {tmp_path / 'missing.json'}" in error
    assert app.gateway is old and probe_tasks() == before


async def test_a_reload_naming_an_unknown_fallback_is_refused(app: GatewayApp) -> None:
    old = app.gateway
    rewrite(app, config(fallback={"model": "digits-nope"}))
    with pytest.raises(BadRequest, match=r"models\.digits\.fallback\.model: 'digits-nope'"):
        await app.reload()
    assert app.gateway is old and old.config.models["digits"].fallback is not None


async def test_a_new_gateway_that_fails_to_start_is_stopped_whole(
    app: GatewayApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    before, old = probe_tasks(), app.gateway

    def boom(self: object) -> None:
        raise RuntimeError("metadata warmer exploded")

    monkeypatch.setattr("gateway.control.runtime.MetadataWarmer.start", boom)  # after both probers
    rewrite(app, config())
    with pytest.raises(BadRequest, match="did not start: metadata warmer exploded"):
        await app.reload()
    assert app.gateway is old and probe_tasks() == before


async def test_a_good_reload_still_swaps(app: GatewayApp) -> None:
    data = config(fallback={"model": "digits-logreg"})
    data["models"]["digits-too"] = {"pool": "p"}
    rewrite(app, data)
    result = await app.reload()
    assert result["models"] == ["digits", "digits-too"]


async def test_a_reload_that_changes_the_workers_says_it_needs_a_restart(
    app: GatewayApp,
) -> None:
    data = config(fallback={"model": "digits-logreg"})
    data["server"] = {"workers": "auto"}
    rewrite(app, data)
    result = await app.reload()
    assert result["needs_restart_for"] == ["server.workers"]


async def test_draining_readiness_is_503_and_requests_are_still_served(app: GatewayApp) -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        assert (await http.get("/v2/health/ready")).status_code == 200
        bound_s = app.drain()
        assert bound_s == 60.0 + 1.0  # the longest deadline a client may ask, and a little
        ready = await http.get("/v2/health/ready")
        assert ready.status_code == 503
        assert ready.json()["reason"].startswith("draining")
        model = await http.get("/v2/models/digits/ready")
        assert model.status_code == 503 and model.json()["reason"].startswith("draining")
        assert (await http.get("/v2/health/live")).status_code == 200
        served = await http.post("/v2/models/digits/infer", json=REQUEST)
        assert served.status_code == 200, served.text
        with pytest.raises(Conflict, match="draining"):
            await app.reload()


async def test_every_reload_is_audited_with_who_asked_and_how_it_went(
    app: GatewayApp, caplog: pytest.LogCaptureFixture
) -> None:
    """Applied or refused, a reload is an audited action: the operator's name (from the admin
    door; "anonymous" without operators), the reason given, the outcome, in the log and in the
    timeline of the gateway serving afterwards."""
    caplog.set_level("WARNING", logger="gateway.audit")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        applied = await http.post("/admin/reload", json={"reason": "new pool"})
        assert applied.status_code == 200
        rewrite(app, config(fallback={"model": "digits-nope"}))
        refused = await http.post("/admin/reload", json={})
        assert refused.status_code == 400
        too_long = await http.post("/admin/reload", json={"reason": "x" * 501})
        assert too_long.status_code == 400  # refused before anything: not an action
    with pytest.raises(BadRequest, match="digits-nope"):
        await app.reload("SIGHUP", "gateway.yaml changed")
    audits = [r for r in caplog.records if r.name == "gateway.audit"]
    assert [(r.who, r.action, r.target, r.reason, r.outcome[:8]) for r in audits] == [  # type: ignore[attr-defined]
        ("anonymous", "reload", "config", "new pool", "applied"),
        ("anonymous", "reload", "config", "", "refused:"),
        ("SIGHUP", "reload", "config", "gateway.yaml changed", "refused:"),
    ]
    assert "digits-nope" in audits[1].outcome  # type: ignore[attr-defined]
    timeline = [e for e in app.gateway.history.events.newest_first() if e.kind == "manual"]
    assert [e.detail.split(" (")[0] for e in timeline][:3] == [
        "reload by SIGHUP: gateway.yaml changed",
        "reload by anonymous",
        "reload by anonymous: new pool",
    ]

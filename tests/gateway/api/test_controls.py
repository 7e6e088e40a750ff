"""Operators' controls in-process (ASGI) on a fake upstream: actions, errors, the audit trail."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from tests.gateway.api.test_app import REPLY, REQUEST, Upstream
from tests.gateway.conftest import make_config
from tests.gateway.fakes import reply

ALICE = "alice-key-0123456789abcdef"
AS_ALICE = {"authorization": f"Bearer {ALICE}"}


@pytest.fixture
async def gateway(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Gateway]:
    monkeypatch.setenv("ALICE_KEY", ALICE)
    doc = make_config().model_dump(mode="json", exclude_unset=True)
    doc["server"] = {"admin": {"operators": {"alice": {"key_env": "ALICE_KEY"}}}}
    upstream = Upstream()
    upstream.script(reply(200, REPLY))
    gw = Gateway(parse_config(doc), transport=upstream, rng=random.Random(0))
    await gw.start()
    for replica in gw.registry.replicas():
        replica.healthy = True
    yield gw
    await gw.stop()


@pytest.fixture
async def client(gateway: Gateway) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=GatewayApp(gateway))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


async def served_by(client: httpx.AsyncClient, n: int = 30) -> set[str]:
    seen = set()
    for _ in range(n):
        answer = await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
        assert answer.status_code == 200
        seen.add(answer.headers["x-served-by"])
    return seen


async def test_drain_and_restore_are_obeyed_and_audited_with_the_operators_name(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="gateway.audit"):
        drained = await client.post(
            "/admin/replicas/r1/drain", json={"reason": "disk full"}, headers=AS_ALICE
        )
    assert drained.status_code == 200, drained.text
    doc = drained.json()
    assert doc["by"] == "alice" and doc["state"] == "drained by alice: disk full"
    assert doc["outcome"] == "applied" and doc["shared"] is False  # memory: nothing to share
    assert await served_by(client) == {"r0", "r2"}
    [line] = [r for r in caplog.records if r.name == "gateway.audit"]
    assert (line.who, line.action, line.target, line.reason) == (  # type: ignore[attr-defined]
        "alice",
        "drain",
        "replica:r1",
        "disk full",
    )
    assert ALICE not in caplog.text
    state = (await client.get("/admin/state", headers=AS_ALICE)).json()
    assert [r["id"] for r in state["pools"][0]["draining"]] == ["r1"]
    assert state["state_store"]["decisions"]["replica:r1"]["holds"] is True
    restored = await client.post("/admin/replicas/r1/restore", json={}, headers=AS_ALICE)
    assert restored.status_code == 200 and restored.json()["state"] == "in service"
    assert "r1" in await served_by(client)
    history = (await client.get("/admin/history", headers=AS_ALICE)).json()
    manual = [e for e in history["events"] if e["kind"] == "manual" and "by" in e]
    assert [(e["subject"], e["by"]) for e in manual] == [
        ("replica:r1", "alice"),
        ("replica:r1", "alice"),
    ]  # newest first: the restore, then the drain
    assert manual[1]["detail"] == "drain by alice: disk full (applied)"


async def test_a_paused_pool_answers_503_saying_so(client: httpx.AsyncClient) -> None:
    paused = await client.post("/admin/pools/p/pause", json={"reason": "upgrade"}, headers=AS_ALICE)
    assert paused.status_code == 200
    answer = await client.post("/v2/models/digits/infer", content=orjson.dumps(REQUEST))
    assert answer.status_code == 503
    assert answer.json()["error"] == "model 'digits': pool 'p' is paused"  # not who, nor why
    state = (await client.get("/admin/state", headers=AS_ALICE)).json()
    assert state["pools"][0]["paused"] == "paused by alice: upgrade"  # the keyed view says
    assert (await client.post("/admin/pools/p/resume", json={}, headers=AS_ALICE)).is_success
    assert await served_by(client, 5)


@pytest.mark.parametrize(
    ("path", "body", "status", "error"),
    [
        ("/admin/replicas/nope/drain", {}, 404, "no replica 'nope'"),
        ("/admin/pools/nope/pause", {}, 404, "no pool 'nope'"),
        ("/admin/replicas/r0/eject", {}, 400, "duration_s"),
        ("/admin/replicas/r0/eject", {"duration_s": -1}, 400, "duration_s"),
        ("/admin/replicas/r0/drain", {"reason": "x" * 501}, 400, "reason"),
        ("/admin/replicas/r0/drain", {"typo": 1}, 400, "typo"),
        ("/admin/replicas/r0/restore", {}, 409, "not drained or ejected"),
        ("/admin/pools/p/resume", {}, 409, "not paused"),
    ],
)
async def test_bad_actions_are_refused_with_json_errors(
    client: httpx.AsyncClient, path: str, body: dict[str, object], status: int, error: str
) -> None:
    answer = await client.post(path, json=body, headers=AS_ALICE)
    assert answer.status_code == status, answer.text
    assert error in answer.json()["error"]


async def test_actions_need_an_admin_key_and_a_json_body(
    client: httpx.AsyncClient, gateway: Gateway
) -> None:
    assert (await client.post("/admin/replicas/r0/drain", json={})).status_code == 401
    form = await client.post(
        "/admin/replicas/r0/drain",
        content=b"reason=x",
        headers={**AS_ALICE, "content-type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 415
    assert not gateway.registry.pools["p"].draining  # nothing happened


async def test_an_eject_holds_for_its_duration(client: httpx.AsyncClient, gateway: Gateway) -> None:
    answer = await client.post(
        "/admin/replicas/r2/eject", json={"duration_s": 60}, headers=AS_ALICE
    )
    assert answer.status_code == 200
    until = answer.json()["until"]
    assert until == pytest.approx(gateway.clock.wall() + 60, abs=5)
    assert await served_by(client) == {"r0", "r1"}
    controls = (await client.get("/admin/controls", headers=AS_ALICE)).json()["decisions"]
    assert controls["replica:r2"]["state"] == "ejected by alice"


def test_the_actions_are_in_the_openapi_document() -> None:
    from typing import cast

    from gateway.api.admin import build_admin_app

    paths = build_admin_app(cast(Gateway, None)).openapi()["paths"]
    for action in ("drain", "eject", "restore"):
        post = paths[f"/admin/replicas/{{replica_id}}/{action}"]["post"]
        assert {"400", "404", "409"} <= set(post["responses"]), action
    for action in ("pause", "resume"):
        assert f"/admin/pools/{{pool}}/{action}" in paths

"""``/admin/faults`` in-process: absent without faults, and behind the key with them."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from replicas.fault_auth import FaultKey
from replicas.faults import FaultInjector
from replicas.server import ReplicaApp
from tests.support.faults import FAULT_KEY, fault_headers, inject_faults_async

Client = httpx.AsyncClient
WRONG_KEY = "not-the-fault-key-" + FAULT_KEY[:6]


async def _client(app: ReplicaApp) -> Client:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://r")


@pytest.fixture
async def plain(model_path: Path) -> AsyncIterator[Client]:
    """A replica without fault injection."""
    app = ReplicaApp(model_path, name="digits")
    async with await _client(app) as client:
        yield client
    await app.shutdown()


@pytest.fixture
async def guarded(model_path: Path) -> AsyncIterator[Client]:
    """A replica with fault injection, guarded by the tests' `FAULT_KEY`."""
    app = ReplicaApp(
        model_path,
        name="digits",
        faults=FaultInjector(random.Random(0)),
        fault_key=FaultKey(FAULT_KEY),
    )
    async with await _client(app) as client:
        yield client
    await app.shutdown()


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PUT"])
@pytest.mark.parametrize("path", ["/admin/faults", "/admin", "/admin/", "/admin/state"])
async def test_without_faults_nothing_under_admin_exists(
    plain: Client, method: str, path: str
) -> None:
    r = await plain.request(method, path, json={"crash": True}, headers=fault_headers())
    assert (r.status_code, r.json()) == (404, {"error": f"no route for {path}"})


@pytest.mark.parametrize("path", ["/admin", "/admin/", "/admin/faults/", "/admin/state"])
async def test_with_faults_only_the_fault_route_exists(guarded: Client, path: str) -> None:
    assert (await guarded.get(path, headers=fault_headers())).status_code == 404


def test_faults_without_a_key_are_refused(model_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a fault key"):
        ReplicaApp(model_path, name="digits", faults=FaultInjector())


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PUT"])
@pytest.mark.parametrize(
    ("authorization", "error"),
    [
        (None, "need 'Authorization: Bearer <fault key>'"),
        (f"Bearer {WRONG_KEY}", "wrong fault key"),
        (f"Basic {FAULT_KEY}", "need 'Authorization: Bearer <fault key>'"),
        ("Bearer ", "need 'Authorization: Bearer <fault key>'"),
        (f"Bearer {FAULT_KEY}x", "wrong fault key"),
    ],
    ids=["none", "wrong-key", "basic", "empty-bearer", "key-plus-one"],  # keys are random
)
async def test_missing_or_wrong_key_is_401(
    guarded: Client, method: str, authorization: str | None, error: str
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    r = await guarded.request(method, "/admin/faults", json={"hang": True}, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.headers["content-type"] == "application/json"
    assert error in r.json()["error"]
    assert FAULT_KEY not in r.text and WRONG_KEY not in r.text
    assert (await guarded.get("/admin/faults", headers=fault_headers())).json()["hang"] is False


async def test_the_right_key_is_200_and_the_scheme_is_case_insensitive(guarded: Client) -> None:
    assert (await inject_faults_async(guarded, latency_ms=5)).json()["latency_ms"] == 5
    r = await guarded.get("/admin/faults", headers={"Authorization": f"bearer {FAULT_KEY}"})
    assert r.status_code == 200 and FAULT_KEY not in r.text


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
async def test_a_fault_update_must_be_json(guarded: Client, content_type: str | None) -> None:
    headers = fault_headers()
    if content_type is not None:
        headers["content-type"] = content_type
    r = await guarded.post("/admin/faults", content=b'{"hang": true}', headers=headers)
    assert r.status_code == 415
    assert "must be application/json" in r.json()["error"]
    assert (await guarded.get("/admin/faults", headers=fault_headers())).json()["hang"] is False


async def test_json_with_a_charset_is_json(guarded: Client) -> None:
    headers = {**fault_headers(), "content-type": "Application/JSON; charset=utf-8"}
    r = await guarded.post("/admin/faults", content=b'{"latency_ms": 1}', headers=headers)
    assert r.status_code == 200 and r.json()["latency_ms"] == 1


async def test_method_is_checked_after_the_key(guarded: Client) -> None:
    r = await guarded.put("/admin/faults", json={}, headers=fault_headers())
    assert r.status_code == 405

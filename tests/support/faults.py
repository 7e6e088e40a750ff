"""Fault injection on test replicas, with the key: `inject_faults` / `clear_faults` (and async).

Every replica a test starts with ``--enable-faults`` gets `FAULT_KEY` (one random key per test
process) through ``$REPLICA_FAULT_KEY``; these helpers add the matching ``Authorization``
header, so no test repeats it. A replica is given as its base URL or as a client whose
``base_url`` is the replica (an in-process ASGI client, say). Non-2xx answers raise.
"""

from __future__ import annotations

import secrets
from typing import Any

import httpx

from replicas.fault_auth import FAULT_KEY_ENV, bearer

FAULT_KEY = secrets.token_urlsafe(24)
PATH = "/admin/faults"
TIMEOUT_S = 5.0


def fault_env(key: str = FAULT_KEY) -> dict[str, str]:
    """The environment a fault-enabled replica needs for ``key``."""
    return {FAULT_KEY_ENV: key}


def fault_headers(key: str = FAULT_KEY) -> dict[str, str]:
    return bearer(key)


def _client(replica: str) -> httpx.Client:
    return httpx.Client(base_url=replica, trust_env=False, timeout=TIMEOUT_S)


def _async_client(replica: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=replica, trust_env=False, timeout=TIMEOUT_S)


def _checked(response: httpx.Response) -> httpx.Response:
    response.raise_for_status()
    return response


def _send(
    replica: str | httpx.Client, method: str, faults: dict[str, Any] | None
) -> httpx.Response:
    if isinstance(replica, str):
        with _client(replica) as client:
            return _send(client, method, faults)
    return _checked(replica.request(method, PATH, json=faults, headers=fault_headers()))


async def _send_async(
    replica: str | httpx.AsyncClient, method: str, faults: dict[str, Any] | None
) -> httpx.Response:
    if isinstance(replica, str):
        async with _async_client(replica) as client:
            return await _send_async(client, method, faults)
    return _checked(await replica.request(method, PATH, json=faults, headers=fault_headers()))


def inject_faults(replica: str | httpx.Client, **faults: Any) -> httpx.Response:
    """``POST /admin/faults`` with ``faults`` (latency_ms, error_rate, hang, crash, ...)."""
    return _send(replica, "POST", faults)


def clear_faults(replica: str | httpx.Client) -> httpx.Response:
    """``DELETE /admin/faults``: the replica is healthy again."""
    return _send(replica, "DELETE", None)


async def inject_faults_async(replica: str | httpx.AsyncClient, **faults: Any) -> httpx.Response:
    return await _send_async(replica, "POST", faults)


async def clear_faults_async(replica: str | httpx.AsyncClient) -> httpx.Response:
    return await _send_async(replica, "DELETE", None)

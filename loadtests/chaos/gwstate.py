"""What the gateway itself says about its replicas, in a few lines for the report.

The client-side numbers say *that* a run degraded; ``/admin/state`` says *why* (a replica
unhealthy, ejected, quarantined, a breaker open). The runner reads it at the end of each
fault window and at the end of the run. Missing keys are tolerated: the report must not fail
because the gateway's state page grew or changed. A keyed gateway is read with the key in
``GATEWAY_ADMIN_KEY`` (a loopback gateway with no key needs none).
"""

from __future__ import annotations

import os
from typing import Any

import httpx

TIMEOUT_S = 2.0
ADMIN_KEY_ENV = "GATEWAY_ADMIN_KEY"


def _replica_line(replica: dict[str, Any]) -> str | None:
    problems = []
    if replica.get("healthy") is False:
        problems.append("unhealthy")
    breaker = (replica.get("breaker") or {}).get("state")
    if breaker not in (None, "closed"):
        problems.append(f"breaker {breaker}")
    if replica.get("ejected"):
        problems.append(f"ejected ({replica.get('ejection_reason') or 'outlier'})")
    if replica.get("quarantined"):
        problems.append(f"quarantined ({replica.get('quarantine_reason') or 'suspect'})")
    if not problems:
        return None
    return f"{replica.get('id', '?')}: " + ", ".join(problems)


def summarize(state: dict[str, Any]) -> list[str]:
    """One line per replica that is not in good standing, plus pool panic and Redis."""
    lines = []
    for pool in state.get("pools") or []:
        if pool.get("panic"):
            lines.append(f"pool {pool.get('name', '?')}: panic mode (spreading over all)")
        for replica in pool.get("replicas") or []:
            line = _replica_line(replica)
            if line:
                lines.append(line)
    store = state.get("state_store") or {}
    if store.get("backend") == "redis":
        if store.get("degraded"):
            lines.append(
                f"state store redis: degraded, serving on local state "
                f"(last error: {store.get('last_error') or '?'})"
            )
        else:
            lines.append("state store redis: in sync")
    return lines or ["every replica healthy, breakers closed, none ejected or quarantined"]


def snapshot(url: str) -> list[str]:
    """Read and summarize ``/admin/state``; a line saying so if it cannot be read."""
    try:
        key = os.environ.get(ADMIN_KEY_ENV)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        response = httpx.get(
            f"{url}/admin/state", headers=headers, timeout=TIMEOUT_S, trust_env=False
        )
        response.raise_for_status()
        state = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        return [f"/admin/state unreadable: {type(exc).__name__}"]
    if not isinstance(state, dict):
        return ["/admin/state: not a JSON object"]
    return summarize(state) + _rollouts(url, headers)


def _rollouts(url: str, headers: dict[str, str]) -> list[str]:
    """Each declared rollout's phase and share, and its latest decision (who, why)."""
    try:
        response = httpx.get(
            f"{url}/admin/rollouts", headers=headers, timeout=TIMEOUT_S, trust_env=False
        )
        rollouts = response.json().get("rollouts") or {} if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError, AttributeError):
        return []
    lines = []
    for model, r in rollouts.items():
        last = (r.get("trail") or [{}])[-1]
        lines.append(
            f"rollout {model} -> {r.get('candidate', '?')}: {r.get('phase', '?')} at "
            f"{r.get('share_percent', '?')} %; last: {last.get('action', '?')} by "
            f"{last.get('who', '?')} ({last.get('why', '')})"
        )
    return lines

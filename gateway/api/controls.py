"""Operators' controls: drain, eject, restore a replica; pause, resume a pool (keyed POSTs).

Each action becomes a `Decision` (`SharedState.decide`), obeyed here at once, pushed to the
state store at once when one is shared (every gateway of the fleet obeys it by its next pull,
and reads it back after a restart), and audited (`AuditEvent`: who by the operator's name,
what, which target, why, when, and the outcome, including "applied here, not shared yet" when
the store did not answer: it is offered again on every sync tick).

Bodies are JSON (the guard requires the content type for any state change): ``reason``
(optional, up to `MAX_REASON_CHARS`) and, for an eject, ``duration_s``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Body, FastAPI, Request
from pydantic import Field

from gateway.api.guard import operator_of
from gateway.control.runtime import Gateway
from gateway.errors import BadRequest, Conflict, NotFound
from gateway.frozen import Frozen
from gateway.state.decisions import pool_key, replica_key
from gateway.telemetry.audit import AuditEvent
from gateway.upstream.controls import describe

MAX_REASON_CHARS = 500
MAX_EJECT_S = 7 * 86_400.0


class ReasonBody(Frozen):
    """What an operator adds to an action: why (a reload takes this alone)."""

    reason: str = Field("", max_length=MAX_REASON_CHARS, description="why (audited)")


class ControlBody(ReasonBody):
    """What an operator adds to an action: why, and for an eject, for how long."""

    duration_s: float | None = Field(
        None, gt=0, le=MAX_EJECT_S, description="eject only: seconds until it returns by itself"
    )


_BODY = Body(default=None)
_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such replica or pool"},
    409: {"description": "Nothing to undo (the replica is in service, the pool not paused)"},
}


def install_controls(app: FastAPI, gateway: Gateway) -> None:
    """The routes, and this gateway's audit trail and control changes into its timeline."""
    if isinstance(gateway, Gateway):
        # not when the app is built for its OpenAPI document
        gateway.shared.listen(gateway.history.audit, gateway.history.controls_changed)

    @app.post("/admin/replicas/{replica_id}/drain", responses=_RESPONSES)
    async def drain(replica_id: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """No new requests to the replica; those in flight finish. Holds until restored."""
        return await _act(
            gateway, request, replica_key(_replica(gateway, replica_id)), "drain", body
        )

    @app.post("/admin/replicas/{replica_id}/eject", responses=_RESPONSES)
    async def eject(replica_id: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """As drain, for ``duration_s`` seconds; then it returns to service by itself."""
        if body is None or body.duration_s is None:
            raise BadRequest("duration_s: an eject needs a duration in seconds")
        key = replica_key(_replica(gateway, replica_id))
        return await _act(gateway, request, key, "eject", body)

    @app.post("/admin/replicas/{replica_id}/restore", responses=_RESPONSES)
    async def restore(replica_id: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """Returns a drained or ejected replica to service."""
        key = replica_key(_replica(gateway, replica_id))
        _holding(gateway, key, f"replica {replica_id!r} is not drained or ejected")
        return await _act(gateway, request, key, "restore", body)

    @app.post("/admin/pools/{pool}/pause", responses=_RESPONSES)
    async def pause(pool: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """No replica of the pool takes requests: its models fall back, or answer 503."""
        return await _act(gateway, request, pool_key(_pool(gateway, pool)), "pause", body)

    @app.post("/admin/pools/{pool}/resume", responses=_RESPONSES)
    async def resume(pool: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """Ends a pause."""
        key = pool_key(_pool(gateway, pool))
        _holding(gateway, key, f"pool {pool!r} is not paused")
        return await _act(gateway, request, key, "resume", body)

    @app.get("/admin/controls")
    async def controls() -> dict[str, Any]:
        """Every operator decision known here, by target, and whether it holds now."""
        shared = gateway.shared
        return {"decisions": shared.controls.snapshot(shared.decisions.known)}


def _replica(gateway: Gateway, replica_id: str) -> str:
    if gateway.shared.controls.find(replica_id) is None:
        raise NotFound(f"no replica {replica_id!r} in any pool")
    return replica_id


def _pool(gateway: Gateway, pool: str) -> str:
    if pool not in gateway.registry.pools:
        raise NotFound(f"no pool {pool!r} (have {', '.join(sorted(gateway.registry.pools))})")
    return pool


def _holding(gateway: Gateway, key: str, message: str) -> None:
    decision = gateway.shared.decisions.get(key)
    if decision is None or not decision.holds(gateway.clock.wall()):
        raise Conflict(message)


async def _act(
    gateway: Gateway, request: Request, key: str, action: str, body: ControlBody | None
) -> dict[str, Any]:
    body = body or ControlBody()
    who = operator_of(request.scope)
    wall = gateway.clock.wall()
    until = wall + body.duration_s if action == "eject" and body.duration_s else 0.0
    shared = gateway.shared
    decision = shared.decide(key, action, who, body.reason, until)
    not_shared = await shared.publish()
    outcome = "applied" if not_shared is None else f"applied here, not shared yet: {not_shared}"
    shared.audit(AuditEvent(wall, who, action, key, body.reason, outcome, shared.origin))
    return {
        **decision.to_json(),
        "state": describe(decision) if decision.holds(wall) else "in service",
        "outcome": outcome,
        "shared": shared.sync is not None and not_shared is None,
    }

"""Rollouts on the admin API: ``GET /admin/rollouts`` and keyed ``POST`` start, pause, promote,
abort for one model's rollout (`gateway.rollout.controller.Rollouts.act`).

Each action is a decision like an operator's drain: taken here, audited with the operator's
name (never the key) and the evidence at that moment, saved and pushed to the shared store at
once, so every gateway of the fleet follows it. Bodies are optional JSON with a ``reason``.
"""

from __future__ import annotations

from typing import Any

from fastapi import Body, FastAPI, Request

from gateway.api.controls import ControlBody
from gateway.api.guard import operator_of
from gateway.control.runtime import Gateway
from gateway.errors import NotFound

_BODY = Body(default=None)
_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "No such model, or it declares no rollout"},
    409: {"description": "The rollout's phase does not allow the action"},
}


def install_rollouts(app: FastAPI, gateway: Gateway) -> None:
    @app.get("/admin/rollouts")
    async def rollouts() -> dict[str, Any]:
        """Every declared rollout: phase, share, step, evidence (step and total), trail."""
        return gateway.rollouts.snapshot()

    @app.post("/admin/rollouts/{model}/start", responses=_RESPONSES)
    async def start(model: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """Starts (or resumes a paused, restarts a rolled back or aborted) rollout."""
        return await _act(gateway, request, model, "start", body)

    @app.post("/admin/rollouts/{model}/pause", responses=_RESPONSES)
    async def pause(model: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """Holds the rollout at its step: the share stays, nothing advances."""
        return await _act(gateway, request, model, "pause", body)

    @app.post("/admin/rollouts/{model}/promote", responses=_RESPONSES)
    async def promote(model: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """The candidate serves every request of the model from now on."""
        return await _act(gateway, request, model, "promote", body)

    @app.post("/admin/rollouts/{model}/abort", responses=_RESPONSES)
    async def abort(model: str, request: Request, body: ControlBody | None = _BODY) -> Any:
        """Every request back to the model's pool; the candidate keeps running."""
        return await _act(gateway, request, model, "abort", body)


async def _act(
    gateway: Gateway, request: Request, model: str, action: str, body: ControlBody | None
) -> dict[str, Any]:
    if model not in gateway.rollouts.runs:
        declared = ", ".join(sorted(gateway.rollouts.runs)) or "none"
        raise NotFound(f"model {model!r} declares no rollout (declared: {declared})")
    reason = (body or ControlBody()).reason
    doc = gateway.rollouts.act(model, action, operator_of(request.scope), reason)
    not_shared = await gateway.shared.publish()
    gateway.rollouts.unpublished = not_shared is not None
    outcome = "applied" if not_shared is None else f"applied here, not shared yet: {not_shared}"
    return {**doc, "outcome": outcome}

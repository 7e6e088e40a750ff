"""The documents that describe the running gateway: `/admin/state` and `/slo`.

Kept apart from `Gateway` so the runtime holds behaviour and this module holds presentation.
"""

from __future__ import annotations

from typing import Any

from gateway.control.runtime import Gateway


def state_document(gateway: Gateway) -> dict[str, Any]:
    pipeline = gateway.pipeline
    levels = gateway.levels
    sent, won = levels.hedges()
    doc = {
        "ready": gateway.ready(),
        "state_store": gateway.shared.snapshot(),
        "retry_budget": gateway.budget.snapshot(),
        "fallbacks": {n: m.status.to_json() for n, m in gateway.fallback_models.items()},
        "suspects": pipeline.suspects.to_json(),
        "hedges": {"sent": sent, "won": won},
        "models": {
            name: {
                "route": m.route,
                "pools": list(m.pools),
                "version": m.version,
                "ready": gateway.model_ready(m),
                "in_flight": levels.in_flight(name),
                "max_in_flight": m.admission.max_in_flight,
                "shed": levels.shed(name),
                "tenants": levels.tenants(name, m),
                # configured; the burn policy may suspend it
                "hedging": m.hedge.enabled,
                "policy": _adjustment(gateway, name),
                **_correctness(gateway, name),
            }
            for name, m in gateway.config.models.items()
        },
        "pools": gateway.registry.snapshot(),
        "accelerators": gateway.accelerators.snapshot() if gateway.accelerators else {},
    }
    if gateway.data_plane is not None:
        doc["workers"] = gateway.data_plane()
    return doc


def slo_document(gateway: Gateway) -> dict[str, Any]:
    doc = gateway.slo.to_json()
    doc["state_store"] = gateway.shared.snapshot()
    return doc


def _correctness(gateway: Gateway, model: str) -> dict[str, Any]:
    """A model's audits by outcome and its burn policy's vote (why it is voted now), where it
    has either."""
    doc: dict[str, Any] = {}
    config = gateway.config.models[model]
    if config.audit is not None:
        doc["audits"] = {
            "rate": config.audit.rate,
            "against": config.audit.against or config.pools[0],
            "outcomes": gateway.verdicts.to_json().get(model, {}),
        }
    escalation = gateway.slo.escalations.get(model)
    if escalation is not None:
        doc["escalation"] = {
            **escalation.to_json(),
            "vote_pools": list(config.vote_pools[: escalation.config.k]),
        }
    return doc


def _adjustment(gateway: Gateway, model: str) -> dict[str, Any]:
    adjustment = gateway.slo.adjustment(model)
    return {
        "retry_budget_factor": adjustment.retry_budget_factor,
        "hedging_enabled": adjustment.hedging_enabled,
        "fallback_margin_factor": adjustment.fallback_margin_factor,
        "reason": adjustment.reason,
    }

"""Readiness as Kubernetes reads it: per model, and for the gateway as a whole.

A model is ready when it can answer well now: enough of its pools (one, or a vote's quorum)
have a replica that passes health probes and is not quarantined for wrong answers, or its
verified fallback can answer. The gateway is ready while every model it is configured to
require (``required``, the default) is; a model marked ``required: false`` is reported but
does not take the whole gateway out of a Service: every gateway instance sees the same pools,
so pulling them all out because one backend is down only turns a partial outage into a full
one. The document says why whatever is not ready is not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.config.models import ModelConfig
from gateway.upstream.registry import Pool


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str | None = None  # why not ready, or how it is ready when degraded


def serving(pool: Pool, now: float) -> int:
    """Replicas of the pool that pass health probes and are not quarantined."""
    return sum(1 for r in pool.replicas if r.healthy and r.quarantined_until <= now)


def model_readiness(
    model: ModelConfig,
    pools: Mapping[str, Pool],
    fallback_refusal: Callable[[str], str | None],
    now: float,
) -> Readiness:
    """``fallback_refusal(name)``: None when that fallback model can answer, else why not."""
    live = [name for name in model.pools if serving(pools[name], now)]
    needed = model.vote.quorum if model.vote is not None else 1
    if len(live) >= needed:
        return Readiness(True)
    short = (
        f"{len(live)} of {len(model.pools)} pools can answer, {needed} needed"
        if model.vote is not None
        else f"pool {model.pools[0]!r} has no healthy replica that is not quarantined"
    )
    if model.fallback is None:
        return Readiness(False, short)
    refusal = fallback_refusal(model.fallback.model)
    if refusal is None:
        return Readiness(True, f"{short}; the fallback {model.fallback.model!r} answers")
    return Readiness(False, f"{short}; the fallback {model.fallback.model!r} cannot: {refusal}")


def gateway_readiness(
    models: Mapping[str, ModelConfig], states: Mapping[str, Readiness]
) -> dict[str, object]:
    """The ``/v2/health/ready`` document: ready overall, per model, and why not."""
    required = [name for name, model in models.items() if model.required]
    blocking = [name for name in required if not states[name].ready]
    doc: dict[str, object] = {
        "ready": not blocking,
        "models": {name: state.ready for name, state in states.items()},
    }
    reasons = {name: state.reason for name, state in states.items() if state.reason}
    if reasons:
        doc["reasons"] = reasons
    if blocking:
        doc["blocking"] = blocking
    return doc

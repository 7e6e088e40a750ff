"""Readiness as Kubernetes reads it: per model, and for the gateway as a whole.

A model is ready when it can answer well now: enough of its pools (one, or a vote's quorum)
have a replica that passes health probes and is not quarantined for wrong answers, or its
verified fallback can answer. The gateway is ready while every model it is configured to
require (``required``, the default) is; a model marked ``required: false`` is reported but
does not take the whole gateway out of a Service: every gateway instance sees the same pools,
so pulling them all out because one backend is down only turns a partial outage into a full
one. The document says why whatever is not ready is not.

A fallback counts only if it can answer the model's tensors (`FallbackFit`): one that speaks
other names refuses every request it stands in for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gateway.config.models import ModelConfig
from gateway.upstream.registry import Pool
from gateway.v2.fit import fallback_misfit
from gateway.v2.schema import ModelSchema
from v2proto.signature import Signature

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    # why not ready, or how it is ready when degraded
    reason: str | None = None


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


class FallbackFit:
    """Whether each model's fallback can answer its tensors (`gateway.v2.fit`), from the
    model's signature (declared, or its replicas' metadata once fetched: ``schema``) and the
    verified fallback's (``signature``); a misfit is logged once per model."""

    def __init__(
        self,
        models: Mapping[str, ModelConfig],
        schema: Callable[[str], ModelSchema | None],
        signature: Callable[[str], Signature | None],
    ) -> None:
        self._models, self._schema, self._signature = models, schema, signature
        # a model's config -> its name
        self._names = {id(m): n for n, m in models.items()}
        self._said: dict[str, str] = {}

    def misfit(self, name: str) -> str | None:
        """Why model ``name``'s fallback cannot answer its tensors; None when it can, or while
        either signature is unknown."""
        fallback = self._models[name].fallback
        signature = None if fallback is None else self._signature(fallback.model)
        schema = None if signature is None else self._schema(name)
        if fallback is None or signature is None or schema is None:
            return None
        why = fallback_misfit(schema, signature, fallback.tensors)
        if why is not None and self._said.get(name) != why:
            self._said[name] = why
            log.warning(
                "model %s: its fallback %s cannot answer its tensors, so readiness does not "
                "count it and it answers no request: %s",
                name,
                fallback.model,
                why,
            )
        return why

    def refusal(
        self, model: ModelConfig, fallback_refusal: Callable[[str], str | None]
    ) -> Callable[[str], str | None]:
        """``fallback_refusal`` for `model_readiness`, refusing also a fallback that does not
        fit ``model``."""
        name = self._names.get(id(model))

        def refuse(fallback: str) -> str | None:
            why = fallback_refusal(fallback)
            misfit = None if why is not None or name is None else self.misfit(name)
            return why if misfit is None else f"its tensors do not fit the model's: {misfit}"

        return refuse

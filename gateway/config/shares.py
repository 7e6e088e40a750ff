"""A data-plane worker's share of the limits the config sets for the whole gateway.

A worker enforces its limits alone, without asking the others (nothing is shared on the
request path), so each of ``workers`` workers takes its share of every bound that is meant for
the gateway as a whole: a model's ``admission.max_in_flight``, a tenant's in-flight bound, rate
and burst, the retry budget's floor per second, a rollout's shadow copies in flight and per
second, a model's audits in flight and per second, the extra vote legs its burn policy's vote
may hold, and ``server.inflight_bytes``. Counts are rounded up, so a worker always admits at
least one; the sum may exceed the configured bound by less than one per worker. With one
worker the config is returned unchanged. Ratios (the retry budget's ``ratio``, shares of the
byte budget) hold per worker as they hold for the whole.
"""

from __future__ import annotations

import math

from gateway.config.models import GatewayConfig, ModelConfig
from gateway.config.tenants import TenantConfig


def worker_share(config: GatewayConfig, workers: int, inflight_bytes: int) -> GatewayConfig:
    """``config`` with each gateway-wide bound divided among ``workers``; ``inflight_bytes``:
    the gateway's byte budget (the configured one, or the machine's default)."""
    if workers <= 1:
        return config
    server = config.server.model_copy(update={"inflight_bytes": max(1, inflight_bytes // workers)})
    budget = config.retry_budget.model_copy(
        update={"min_per_s": config.retry_budget.min_per_s / workers}
    )
    models = {name: _model_share(model, workers) for name, model in config.models.items()}
    tenants = {name: _tenant_share(t, workers) for name, t in config.tenants.items()}
    return config.model_copy(
        update={"server": server, "retry_budget": budget, "models": models, "tenants": tenants}
    )


def _share(count: int, workers: int) -> int:
    return max(1, math.ceil(count / workers))


def _model_share(model: ModelConfig, workers: int) -> ModelConfig:
    admission = model.admission.model_copy(
        update={"max_in_flight": _share(model.admission.max_in_flight, workers)}
    )
    update: dict[str, object] = {"admission": admission}
    if model.rollout is not None:
        rollout = model.rollout
        update["rollout"] = rollout.model_copy(
            update={
                "shadow_concurrency": _share(rollout.shadow_concurrency, workers),
                "shadow_rate_per_s": rollout.shadow_rate_per_s / workers,
            }
        )
    if model.audit is not None:
        audit = model.audit
        update["audit"] = audit.model_copy(
            update={
                "max_in_flight": _share(audit.max_in_flight, workers),
                "max_per_s": audit.max_per_s / workers,
            }
        )
    escalation = model.burn_policy.vote
    if escalation.enabled:
        vote = escalation.model_copy(
            update={"max_extra_in_flight": _share(escalation.max_extra_in_flight, workers)}
        )
        update["burn_policy"] = model.burn_policy.model_copy(update={"vote": vote})
    return model.model_copy(update=update)


def _tenant_share(tenant: TenantConfig, workers: int) -> TenantConfig:
    update: dict[str, object] = {}
    if tenant.max_in_flight is not None:
        update["max_in_flight"] = _share(tenant.max_in_flight, workers)
    if tenant.rate_per_s is not None:
        update["rate_per_s"] = tenant.rate_per_s / workers
        update["burst"] = _share(tenant.bucket_size, workers)
    return tenant.model_copy(update=update) if update else tenant

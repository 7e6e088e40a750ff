"""The whole request pipeline, outer to inner, in one place.

    admission ── deadline ── fallback ── route ─┬─ single ──────────────┐
                                                └─ vote: k legs, vote ──┴─ leg:
                                   retry ── hedge ── balance ── attempt ── transport ── replica

- admission: bounded in-flight per model, shared by tenants by weight, shed at once (429 to a
  tenant over its share, 503 when the model is full; Retry-After);
- deadline: nothing below runs past the request's deadline (504);
- fallback: the verified in-process model answers, degraded, when the primary path cannot;
- route: the model's pool, or a vote over pools (each leg a full single route); one request
  counts once towards the retry budget's allowance, however many legs it has;
- retry: one loop of tries on untried replicas; `RetryPolicy` (bounded, jittered, before the
  deadline, budgeted) decides each retry, and the attempt layer's per-try timeout; slow tries race;
  every send beyond a leg's first (a retry, a hedge, a vote's tie-break) spends the budget;
- hedge: optional second copy after the pool's p95;
- balance: eligibility (health, ejection, quarantine, breaker, spares, panic), then P2C;
- attempt: one classified exchange; its `Outcome` feeds the replica's breaker, the outlier
  detector and the latency window.

What flows down (`gateway.pipeline.call`): above the route, the frozen `InferCall` (its
`Ledger` counts the attempts); from the route down, a `Leg` (the call on one pool with its
`Tries`); from the balancer to the attempt, a `Try` (the leg and the chosen replica). What flows
up is an `InferResult`, or one error carrying its `Outcome`.

Each layer is a class holding the next handler with one ``async __call__``; to see or change
the order of the pipeline, read or edit this function and nothing else. Every layer that waits
(backoff, per-try timeout, hedge delay, deadline, fallback reserve, straggler grace) waits on
the injected `Clock`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.config.tenants import TenantConfig
from gateway.pipeline.admission import AdmissionLayer
from gateway.pipeline.attempt import AttemptLayer
from gateway.pipeline.balance import BalanceLayer
from gateway.pipeline.call import Adjuster, Handler, no_adjustment
from gateway.pipeline.deadline import DeadlineLayer
from gateway.pipeline.fallback import FallbackLayer, FallbackRunner
from gateway.pipeline.hedge import HedgeLayer
from gateway.pipeline.retry import RetryLayer
from gateway.pipeline.retry_policy import RetryPolicy
from gateway.pipeline.route import Router, SingleRoute
from gateway.pipeline.vote import VoteRoute
from gateway.policies.budget import RetryBudget
from gateway.policies.selection import PowerOfTwoChoices
from gateway.telemetry.metrics import Metrics
from gateway.upstream.registry import Registry
from gateway.upstream.transport import Transport


@dataclass(frozen=True, slots=True)
class Pipeline:
    handler: Handler
    admission: AdmissionLayer
    fallback: FallbackLayer
    vote: VoteRoute
    hedge: HedgeLayer
    attempt: AttemptLayer


def build_pipeline(
    registry: Registry,
    transport: Transport,
    budget: RetryBudget,
    clock: Clock,
    rng: random.Random,
    fallbacks: Mapping[str, FallbackRunner] | None = None,
    metrics: Metrics | None = None,
    adjust: Adjuster | None = None,
    tenants: Mapping[str, TenantConfig] | None = None,
) -> Pipeline:
    metrics = metrics or Metrics(process=False)
    adjust = adjust or no_adjustment
    retry = RetryPolicy(budget, adjust, metrics, clock, rng)
    attempt = AttemptLayer(transport, retry, clock, metrics)
    balance = BalanceLayer(PowerOfTwoChoices(rng), clock, attempt)
    hedge = HedgeLayer(retry, clock, metrics, adjust, balance)
    leg = RetryLayer(retry, hedge)
    vote = VoteRoute(registry, leg, clock, metrics, retry.pay)
    route = Router({"single": SingleRoute(registry, leg), "vote": vote}, retry.count_request)
    fallback = FallbackLayer(fallbacks or {}, clock, metrics, adjust, route)
    deadline = DeadlineLayer(clock, fallback)
    admission = AdmissionLayer(metrics, deadline, tenants)
    return Pipeline(admission, admission, fallback, vote, hedge, attempt)

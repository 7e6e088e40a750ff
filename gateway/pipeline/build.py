"""The whole request pipeline, outer to inner, in one place.

    admission ── deadline ── route(single) ── retry ── hedge ── balance ── attempt ── transport

- admission: bounded in-flight per model, shed at once (503 + Retry-After);
- deadline: nothing below runs past the request's deadline (504);
- route: resolves the model's pool;
- retry: jittered, bounded, budgeted retries on untried replicas (tenacity);
- hedge: optional second copy after the pool's p95;
- balance: eligibility (health, ejection, breaker, spares, panic) then power-of-two-choices;
- attempt: one classified exchange; its `Outcome` feeds the replica's breaker, the outlier
  detector and the latency window.

Each layer is a class holding the next handler with one ``async __call__``; to see or change
the order of the pipeline, read or edit this function and nothing else.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from gateway.clock import Clock
from gateway.pipeline.admission import AdmissionLayer
from gateway.pipeline.attempt import AttemptLayer
from gateway.pipeline.balance import BalanceLayer
from gateway.pipeline.call import Handler
from gateway.pipeline.deadline import DeadlineLayer
from gateway.pipeline.hedge import HedgeLayer
from gateway.pipeline.retry import RetryLayer
from gateway.pipeline.route import SingleRoute
from gateway.policies.budget import RetryBudget
from gateway.policies.selection import PowerOfTwoChoices
from gateway.upstream.registry import Registry
from gateway.upstream.transport import Transport


@dataclass(frozen=True, slots=True)
class Pipeline:
    handler: Handler
    admission: AdmissionLayer
    hedge: HedgeLayer
    attempt: AttemptLayer


def build_pipeline(
    registry: Registry,
    transport: Transport,
    budget: RetryBudget,
    clock: Clock,
    rng: random.Random,
) -> Pipeline:
    attempt = AttemptLayer(transport, budget, clock)
    balance = BalanceLayer(PowerOfTwoChoices(rng), attempt)
    hedge = HedgeLayer(budget, balance)
    retry = RetryLayer(budget, clock, rng, hedge)
    route = SingleRoute(registry, retry)
    deadline = DeadlineLayer(route)
    admission = AdmissionLayer(deadline)
    return Pipeline(admission, admission, hedge, attempt)

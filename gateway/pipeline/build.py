"""The whole request pipeline, outer to inner, in one place.

    deadline ── route(single) ── balance ── attempt ── transport ── replica

Each layer is a class holding the next handler with one ``async __call__``; to see or change
the order of the pipeline, read or edit this function and nothing else.
"""

from __future__ import annotations

import random

from gateway.clock import Clock
from gateway.pipeline.attempt import AttemptLayer
from gateway.pipeline.balance import BalanceLayer
from gateway.pipeline.call import Handler
from gateway.pipeline.deadline import DeadlineLayer
from gateway.pipeline.route import SingleRoute
from gateway.policies.selection import PowerOfTwoChoices
from gateway.upstream.registry import Registry
from gateway.upstream.transport import Transport


def build_pipeline(
    registry: Registry, transport: Transport, clock: Clock, rng: random.Random
) -> Handler:
    attempt = AttemptLayer(transport, clock)
    balance = BalanceLayer(PowerOfTwoChoices(rng), attempt)
    route = SingleRoute(registry, balance)
    return DeadlineLayer(route)

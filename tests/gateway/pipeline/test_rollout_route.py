"""The rollout route on a scripted transport and virtual time: a canary's failure is answered
by the pool, a copy never delays the client's answer, and copies spend no retry budget."""

from __future__ import annotations

import random

from gateway.config import parse_config
from gateway.pipeline.build import build_pipeline
from gateway.rollout.controller import Rollouts
from gateway.state.decisions import Decision, DecisionBook
from tests.gateway.fakes import hang, reply
from tests.gateway.pipeline.rig import A, B, Rig


def rig_with(mode: str, **rollout: object) -> tuple[Rig, Rollouts]:
    def pool(replica: str, port: int) -> dict[str, object]:
        return {
            "model": "digits-mlp",
            "binary_tensors": True,
            "replicas": [{"id": replica, "url": f"http://127.0.0.1:{port}"}],
        }

    config = parse_config(
        {
            "pools": {"now": pool("now-0", 9000), "next": pool("next-0", 9001)},
            "models": {
                "digits": {
                    "pool": "now",
                    "rollout": {
                        "candidate": "next",
                        "mode": mode,
                        "steps": [100],
                        "shed_loop_lag_ms": 1000,
                        **rollout,
                    },
                }
            },
        }
    )
    rig = Rig(config)
    book = DecisionBook("gw")

    def decide(key: str, action: str, by: str, reason: str, *, floor: int) -> Decision:
        return book.decide(key, action, by, reason, rig.clock.wall(), floor=floor)

    rollouts = Rollouts(
        config.models,
        rig.clock,
        random.Random(0),
        decide=decide,
        known=book.get,
        audit=lambda e: None,
        burning=lambda m: False,
        synced=lambda: True,
        origin="gw",
    )
    rollouts.activate()
    rig.pipeline = build_pipeline(
        rig.registry,
        rig.transport,
        rig.budget,
        rig.clock,
        random.Random(0),
        None,
        rig.metrics,
        None,
        None,
        rollouts,
    )
    return rig, rollouts


async def test_a_request_the_canary_fails_is_answered_by_the_pool() -> None:
    rig, rollouts = rig_with("canary", compare_percent=0)
    rig.transport.behaviours[B] = reply(500, b'{"error":"boom"}')
    result = await rig.run()
    assert (result.status, result.served_by) == (200, "now-0")
    step = rollouts.runs["digits"].step
    assert (step.candidate_requests, step.candidate_errors) == (1, 1)


async def test_the_client_never_waits_for_its_copy() -> None:
    rig, rollouts = rig_with("shadow")
    rig.transport.behaviours[B] = hang()  # the candidate never answers the copy
    started = rig.clock.now()
    result = await rig.run(timeout_s=10)
    assert (result.status, result.served_by) == (200, "now-0")
    assert rig.clock.now() == started  # answered at once, the copy still in flight
    assert rollouts.gate("digits").in_flight == 1
    await rig.pipeline.aclose()  # the gateway stops: the copy is cancelled, its slot freed
    assert rollouts.gate("digits").in_flight == 0


async def test_a_failed_copy_is_not_retried_and_spends_no_budget() -> None:
    rig, rollouts = rig_with("shadow")
    rig.transport.behaviours[B] = reply(503, b'{"error":"busy"}')
    result = await rig.run()
    assert result.served_by == "now-0"
    await rig.clock.idle()
    assert len(rig.transport.calls[B]) == 1 and rig.budget.spent_total == 0
    assert rollouts.runs["digits"].step.compare_errors == 1
    assert rig.transport.calls[A]  # the client's request went to the pool

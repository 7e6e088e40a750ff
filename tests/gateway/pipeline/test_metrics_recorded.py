"""What the pipeline records per request, on virtual time: the queue time once per request
(a vote's legs and a request's retries included), attempts by pool, and per-try timeouts."""

from __future__ import annotations

from gateway.telemetry.series import Buckets
from tests.gateway.conftest import make_config
from tests.gateway.fakes import hang, reply
from tests.gateway.pipeline.rig import A, Rig
from tests.gateway.pipeline.votes import MODEL, answer, by_pool, vote_call, vote_config


def queue(rig: Rig, model: str) -> Buckets:
    return rig.metrics.catalog.queue.labels(model, "")


async def test_a_vote_records_one_queue_time_for_its_three_legs() -> None:
    rig = Rig(vote_config(), by_pool({k: reply(200, answer(7)) for k in "abc"}))
    await rig.pipeline.handler(vote_call(rig))
    await rig.pipeline.handler(vote_call(rig))
    assert queue(rig, MODEL).count == 2
    attempts = rig.metrics.catalog.attempts
    assert sum(v.value for labels, v in attempts.items() if labels[0] == MODEL) == 6
    assert {labels[1] for labels, _ in attempts.items()} == {"a", "b", "c"}  # the pools


async def test_a_retried_request_records_one_queue_time_and_both_attempts() -> None:
    rig = Rig(make_config(replicas=2), {A: reply(503)})
    rig.replica(1).outstanding = 50  # P2C tries the failing replica first
    result = await rig.run()
    assert result.attempts == 2
    cells = queue(rig, "digits")
    assert cells.count == 1 and cells.sum == 0.0  # virtual time: nothing passed before the send
    outcomes = {labels[2:]: v.value for labels, v in rig.metrics.catalog.attempts.items()}
    assert outcomes == {("r0", "server_error"): 1, ("r1", "success"): 1}


async def test_a_try_past_its_per_try_timeout_is_counted_by_pool_and_replica() -> None:
    rig = Rig(make_config(replicas=2), {A: hang()})
    rig.prime()
    rig.replica(1).outstanding = 50
    await rig.run(timeout_s=5.0)
    timeouts = rig.metrics.catalog.per_try_timeouts
    assert {labels: v.value for labels, v in timeouts.items()} == {("digits", "p", "r0"): 1}
    await rig.pipeline.attempt.aclose()

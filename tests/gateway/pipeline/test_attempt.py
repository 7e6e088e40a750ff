"""The attempt layer's per-try timeout: a short try while a retry could follow, all the time
left otherwise; a try given up on keeps running and is judged by how it really ends."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import DeadlineExceeded
from gateway.outcome import OutcomeKind
from tests.gateway.conftest import make_config
from tests.gateway.fakes import hang, reply
from tests.gateway.pipeline.rig import A, Rig, slow


async def test_a_hung_replica_costs_one_short_try_and_fails_at_the_deadline() -> None:
    rig = Rig(make_config(replicas=2), {A: hang()})
    rig.prime()  # answers of 2 ms: the per-try timeout is its floor, min_ms
    rig.replica(1).outstanding = 50  # P2C tries the hung replica first
    started = rig.clock.now()
    call = rig.call(timeout_s=1.0)
    result = await rig.pipeline.handler(call)
    assert result.served_by == "r1" and result.attempts == 2
    min_try_s = rig.config.models["digits"].retry.try_timeout.min_ms / 1000
    [short_try] = [o for o in call.ledger.outcomes if o.kind is OutcomeKind.SLOW]
    assert short_try.replica == "r0" and short_try.latency_s == min_try_s
    assert rig.clock.now() - started == pytest.approx(min_try_s)
    hung = rig.replica(0)
    assert hung.outstanding == 1 and hung.failures == 0  # still waiting in the background
    await asyncio.gather(*rig.pipeline.attempt.background, return_exceptions=True)
    assert rig.clock.now() - started == pytest.approx(1.0)  # it timed out at the deadline
    assert hung.outstanding == 0 and hung.failures == 1  # a failure


async def test_a_slow_replica_is_retried_but_not_counted_as_failed() -> None:
    rig = Rig(make_config(replicas=2))
    rig.transport.behaviours[A] = slow(rig.clock, 0.06)  # three times the 20 ms per-try timeout
    rig.prime()
    rig.replica(1).outstanding = 50
    result = await rig.run(timeout_s=5.0)
    assert result.served_by == "r1"
    await asyncio.gather(*rig.pipeline.attempt.background, return_exceptions=True)
    slow_replica = rig.replica(0)
    assert slow_replica.failures == 0 and slow_replica.consecutive_failures == 0
    assert slow_replica.ewma_latency_s == pytest.approx(0.06)


async def test_a_slow_try_that_answers_first_wins_over_its_retry() -> None:
    rig = Rig(make_config(replicas=2))
    rig.transport.behaviours[A] = slow(rig.clock, 0.03)
    rig.transport.behaviours["127.0.0.1:9001"] = slow(rig.clock, 0.5)
    rig.prime()
    rig.replica(1).outstanding = 50
    started = rig.clock.now()
    result = await rig.run(timeout_s=5.0)
    assert result.served_by == "r0" and rig.clock.now() - started == pytest.approx(0.03)
    await rig.clock.idle()
    assert rig.replica(1).outstanding == 50  # the losing copy was cancelled, not waited for
    assert rig.clock.now() - started == pytest.approx(0.03)


async def test_the_last_possible_try_gets_all_the_time_left() -> None:
    rig = Rig(make_config(replicas=1), {A: hang()})
    rig.prime()
    call = rig.call(timeout_s=0.3)
    with pytest.raises(DeadlineExceeded):
        await rig.pipeline.handler(call)
    assert [o.kind for o in call.ledger.outcomes] == [OutcomeKind.CANCELLED]  # no SLOW: it waited


async def test_an_answer_within_the_per_try_timeout_is_taken_as_is() -> None:
    rig = Rig(make_config(replicas=2))
    rig.transport.behaviours[A] = slow(rig.clock, 0.01, reply(200, b'{"outputs":[]}'))
    rig.prime()
    rig.replica(1).outstanding = 50
    call = rig.call()
    result = await rig.pipeline.handler(call)
    assert result.served_by == "r0" and [o.kind for o in call.ledger.outcomes] == [
        OutcomeKind.SUCCESS
    ]

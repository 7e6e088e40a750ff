"""The attempt layer's per-try timeout: a short try while a retry could follow, all the time
left otherwise; a try given up on keeps running and is judged by how it really ends."""

from __future__ import annotations

import asyncio
import errno

import pytest

from gateway.errors import DeadlineExceeded, Overloaded, UpstreamFailed
from gateway.outcome import OutcomeKind
from gateway.upstream.transport.local_errors import local_error
from tests.gateway.conftest import make_config
from tests.gateway.fakes import fail, hang, reply
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


async def test_the_gateways_own_shortage_is_charged_to_no_replica() -> None:
    """A connect that failed for the gateway's lack of file descriptors: no failure counted,
    no breaker or outlier strike, the streak the replica had left as it was; the request is
    retried on another replica, and the attempt is counted as ``local_resource``."""
    rig = Rig(make_config(replicas=2), {A: fail(_short())})
    rig.prime()
    rig.replica(1).outstanding = 50  # P2C tries r0 first
    short = rig.replica(0)
    short.consecutive_failures = 2  # an earlier streak: neither reset nor lengthened
    call = rig.call(timeout_s=1.0)
    result = await rig.pipeline.handler(call)
    assert result.served_by == "r1"
    assert call.ledger.outcomes[0].kind is OutcomeKind.LOCAL_RESOURCE
    assert short.failures == 0 and short.consecutive_failures == 2 and short.last_error is None
    assert short.breaker is not None and short.breaker.state() == "closed"
    assert not short.ejected(rig.clock.now())


async def test_however_often_the_gateway_runs_short_no_breaker_opens() -> None:
    rig = Rig(make_config(replicas=1), {A: fail(_short())})
    rig.prime()
    for _ in range(20):  # far past the breaker's and the outlier detector's thresholds
        with pytest.raises(UpstreamFailed) as raised:
            await rig.run(timeout_s=1.0)
        assert "short of file descriptors or memory" in raised.value.message
    only = rig.replica(0)
    assert only.breaker is not None and only.breaker.state() == "closed"
    assert not only.ejected(rig.clock.now()) and only.failures == 0


def _short() -> Exception:
    """What a transport raises when the gateway has no file descriptor left."""
    error = local_error(OSError(errno.EMFILE, "Too many open files"))
    assert error is not None
    return error


async def test_an_answer_with_no_room_is_the_gateways_shortage_and_not_retried() -> None:
    """The in-flight bytes had no room for a reply's body (`Overloaded` from the transport):
    503 with Retry-After to the client at once (another replica's answer would not fit
    either), the attempt counted as ``local_resource``, charged to no replica."""
    rig = Rig(make_config(replicas=2), {A: fail(Overloaded("no room for its answer"))})
    rig.prime()
    rig.replica(1).outstanding = 50  # P2C tries r0 first
    full = rig.replica(0)
    call = rig.call(timeout_s=1.0)
    with pytest.raises(Overloaded) as raised:
        await rig.pipeline.handler(call)
    assert raised.value.status == 503 and raised.value.headers()["retry-after"] == "1"
    assert [o.kind for o in call.ledger.outcomes] == [OutcomeKind.LOCAL_RESOURCE]
    assert full.failures == 0 and full.consecutive_failures == 0 and full.last_error is None
    assert full.breaker is not None and full.breaker.state() == "closed"
    assert not full.ejected(rig.clock.now()) and full.outstanding == 0

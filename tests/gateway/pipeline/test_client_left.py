"""A client that leaves: its request's task is cancelled, and everything it started stops.

On virtual time, with replicas that take 3 s: each test lets the request start its tries (the
per-try race, a hedge, a vote's legs), cancels the request's task as a door does when its client
leaves, and checks, with no time passed since the cancel, that every exchange the replicas saw
has ended (cancelled), every slot is given back (admission, the replicas' outstanding counts, the
background tries), no replica was charged, and nothing new was sent afterwards.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from gateway.call import InferCall
from gateway.config import GatewayConfig, parse_config
from gateway.outcome import OutcomeKind
from gateway.upstream.breaker import CLOSED
from gateway.upstream.transport.base import Reply
from tests.gateway.conftest import make_config
from tests.gateway.fakes import Behaviour, reply
from tests.gateway.pipeline.rig import A, B, C, Rig
from tests.gateway.pipeline.votes import MODEL, answer, vote_call
from tests.support.virtual_time import VirtualClock

SLOW_S = 3.0  # how long every replica takes
LEAVES_AT_S = 0.3  # when the client hangs up


class Replicas:
    """Scripted replicas that take their time, and what they saw: exchanges open now, begun,
    and ended by a cancellation (the gateway hung up)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.open: Counter[str] = Counter()
        self.begun: Counter[str] = Counter()
        self.cancelled: Counter[str] = Counter()

    def slow(self, name: str, seconds: float = SLOW_S, then: Behaviour | None = None) -> Behaviour:
        answered = then or reply(200)

        async def behave(method: str, path: str, payload: bytes) -> Reply:
            self.open[name] += 1
            self.begun[name] += 1
            try:
                await self.clock.sleep(seconds)
            except asyncio.CancelledError:
                self.cancelled[name] += 1
                raise
            finally:
                self.open[name] -= 1
            return await answered(method, path, payload)

        return behave

    def outstanding(self) -> int:
        return sum(self.open.values())


async def leave(rig: Rig, call: InferCall, replicas: Replicas, tries: int) -> float:
    """Runs ``call`` as a request's task until ``tries`` exchanges are open at the replicas,
    at `LEAVES_AT_S`; then cancels it as a door does when its client leaves. Returns when."""
    task = asyncio.ensure_future(rig.pipeline.handler(call))
    await rig.clock.sleep(LEAVES_AT_S)
    assert replicas.outstanding() == tries, dict(replicas.open)
    left = rig.clock.now()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return left


def assert_all_stopped(rig: Rig, call: InferCall, replicas: Replicas, left: float) -> None:
    """Everything the request started has ended, with no time passed, and nobody was charged."""
    assert rig.clock.now() == left  # stopped at once, not at the replicas' 3 s
    assert replicas.outstanding() == 0, dict(replicas.open)
    assert replicas.cancelled == replicas.begun  # each exchange ended by the gateway hanging up
    assert not rig.pipeline.attempt.background
    assert sum(rig.pipeline.admission.in_flight.values()) == 0
    kinds = Counter(outcome.kind for outcome in call.ledger.outcomes)
    assert kinds[OutcomeKind.CANCELLED] == sum(replicas.begun.values()), kinds
    assert set(kinds) <= {OutcomeKind.CANCELLED, OutcomeKind.SLOW}, kinds
    for pool in rig.registry.pools.values():
        for replica in pool.replicas:
            assert replica.outstanding == 0, replica.id
            assert replica.failures == 0 and replica.ejections == 0, replica.id
            assert replica.breaker is None or replica.breaker.state() == CLOSED, replica.id


async def nothing_more_is_sent(rig: Rig, replicas: Replicas) -> None:
    """Time runs past the request's deadline: no try, retry or tie-break goes out for it."""
    begun = sum(replicas.begun.values())
    await rig.clock.sleep(10.0)
    assert sum(replicas.begun.values()) == begun and replicas.outstanding() == 0


async def test_the_retry_loops_slow_tries_stop_with_the_one_it_waits_for() -> None:
    """The issue's case: three replicas slowed to 3 s, a 5 s deadline; the per-try race leaves
    the slow tries running in the background and waits on the last one."""
    clock = VirtualClock()
    replicas = Replicas(clock)
    rig = Rig(make_config(), {k: replicas.slow(k) for k in (A, B, C)}, clock=clock)
    rig.prime()  # a learned per-try timeout of 20 ms: three tries in 60 ms
    for index in range(3):
        rig.replica(index).consecutive_failures = 2  # a streak a cancelled try must not clear
    call = rig.call(timeout_s=5.0)
    left = await leave(rig, call, replicas, tries=3)
    assert_all_stopped(rig, call, replicas, left)
    assert [rig.replica(index).consecutive_failures for index in range(3)] == [2, 2, 2]
    await nothing_more_is_sent(rig, replicas)


async def test_a_request_waiting_out_a_backoff_stops_its_slow_try_and_sends_nothing_more() -> None:
    clock = VirtualClock()
    replicas = Replicas(clock)
    behaviours = {
        A: replicas.slow(A),  # slow: left running in the background
        B: replicas.slow(B, 0.01, then=reply(503)),  # fails: the retry waits out a backoff
        C: replicas.slow(C),
    }
    config = make_config(retry={"backoff_base_ms": 1000, "backoff_max_ms": 1000})
    rig = Rig(config, behaviours, clock=clock, seed=3)
    rig.prime()
    rig.replica(2).outstanding = 100  # P2C takes r0, then r1
    call = rig.call(timeout_s=5.0)
    task = asyncio.ensure_future(rig.pipeline.handler(call))
    await rig.clock.sleep(0.06)  # r0 slow (20 ms), r1 answered 503 (at 30 ms): in the backoff
    assert replicas.begun == Counter({A: 1, B: 1}) and replicas.outstanding() == 1
    rig.replica(2).outstanding = 0
    left = rig.clock.now()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rig.clock.now() == left and replicas.outstanding() == 0
    assert replicas.cancelled == Counter({A: 1})
    assert not rig.pipeline.attempt.background
    assert sum(rig.pipeline.admission.in_flight.values()) == 0
    spent = rig.budget.spent_total
    await nothing_more_is_sent(rig, replicas)
    assert rig.budget.spent_total == spent  # no retry paid for it once it was cancelled


async def test_a_hedged_request_stops_both_copies() -> None:
    """The hedge goes at the pool's p95 (5 ms); the first copy, slow past its per-try timeout,
    is one of the hedge's errors and so left in the background: both stop."""
    clock = VirtualClock()
    replicas = Replicas(clock)
    hedged = make_config(replicas=2, hedge={"enabled": True, "min_samples": 5, "min_delay_ms": 1})
    rig = Rig(hedged, {k: replicas.slow(k) for k in (A, B)}, clock=clock)
    rig.prime(0.005, samples=30)
    rig.replica(1).outstanding = 100  # P2C takes r0 first
    call = rig.call(timeout_s=5.0)
    task = asyncio.ensure_future(rig.pipeline.handler(call))
    await rig.clock.sleep(0.001)
    rig.replica(1).outstanding = 0
    await rig.clock.sleep(LEAVES_AT_S)
    assert replicas.outstanding() == 2 and rig.pipeline.hedge.hedges_sent == 1
    left = rig.clock.now()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert_all_stopped(rig, call, replicas, left)
    await nothing_more_is_sent(rig, replicas)


def _vote_pools(replicas_per_pool: int) -> GatewayConfig:
    """The vote model over three pools of ``replicas_per_pool`` replicas each."""
    pools: dict[str, Any] = {
        name: {
            "model": f"digits-{name}",
            "replicas": [
                {"id": f"{name}{i}", "url": f"http://127.0.0.1:{port + i}"}
                for i in range(replicas_per_pool)
            ],
        }
        for name, port in {"a": 9100, "b": 9200, "c": 9300}.items()
    }
    vote = {"pools": list(pools), "quorum": 2}
    return parse_config({"pools": pools, "models": {MODEL: {"vote": vote}}})


async def test_a_vote_stops_every_leg_and_each_legs_slow_try() -> None:
    clock = VirtualClock()
    replicas = Replicas(clock)
    ports = [port + i for port in (9100, 9200, 9300) for i in range(2)]
    labelled = reply(200, answer(7))
    behaviours = {f"127.0.0.1:{p}": replicas.slow(str(p), then=labelled) for p in ports}
    rig = Rig(_vote_pools(2), behaviours, clock=clock)
    for pool in "abc":
        rig.prime(pool=pool)  # each leg: a 20 ms try, then its pool's other replica
    call = vote_call(rig, timeout_s=5.0)
    left = await leave(rig, call, replicas, tries=6)
    assert_all_stopped(rig, call, replicas, left)
    assert not rig.pipeline.suspects.to_json().get(MODEL)  # no vote, no dissent
    await nothing_more_is_sent(rig, replicas)

"""Retries, budget, breakers, ejection, admission and hedging through the real pipeline,
on a scripted transport and a fake clock (no sleeping).

The per-try timeout, the hedge delay and the deadline wait on the event loop's own time, so
those tests run on real time; they assert on what happened and in which order (outcomes,
outstanding tries, who answered), never on how fast this machine did it.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from gateway.clock import FakeClock
from gateway.config import GatewayConfig
from gateway.config.policies import RetryBudgetConfig
from gateway.deadline import Deadline
from gateway.errors import (
    NoReplicaAvailable,
    Overloaded,
    RejectedByReplicas,
    UpstreamConnectError,
    UpstreamFailed,
)
from gateway.pipeline.build import Pipeline, build_pipeline
from gateway.pipeline.call import InferCall
from gateway.policies.budget import RetryBudget
from gateway.policies.classify import OutcomeKind
from gateway.upstream.breaker import OPEN
from gateway.upstream.registry import Registry
from gateway.upstream.transport import UpstreamResponse
from tests.gateway.conftest import make_config
from tests.gateway.fakes import FakeTransport, fail, hang, reply
from tests.support.processes import wait_until_async

A, B, C = "127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002"


class Rig:
    def __init__(
        self, config: GatewayConfig, transport: FakeTransport, budget: dict[str, Any] | None = None
    ) -> None:
        self.clock = FakeClock()
        self.config = config
        self.registry = Registry(config, self.clock)
        self.transport = transport
        self.budget = RetryBudget(RetryBudgetConfig(**(budget or {})), self.clock)
        self.pipeline: Pipeline = build_pipeline(
            self.registry, transport, self.budget, self.clock, random.Random(0)
        )

    def call(self, timeout_s: float = 1.0) -> InferCall:
        return InferCall(
            model_name="digits",
            model=self.config.models["digits"],
            body=b"{}",
            upstream_headers={},
            deadline=Deadline.after(self.clock, timeout_s),
            request_id="t",
        )

    async def run(self, timeout_s: float = 1.0) -> Any:
        return await self.pipeline.handler(self.call(timeout_s))

    def replica(self, index: int) -> Any:
        return self.registry.pools["p"].replicas[index]


async def test_a_failing_replica_is_retried_elsewhere() -> None:
    rig = Rig(make_config(), FakeTransport({A: reply(503), B: reply(503)}))
    for _ in range(20):
        result = await rig.run()
        assert result.status == 200 and result.served_by == "r2"
    assert max(len(rig.transport.calls[k]) for k in (A, B)) <= 20


async def test_retries_never_repeat_a_replica_and_stop_at_max_attempts() -> None:
    rig = Rig(make_config(replicas=5, retry={"max_attempts": 3}), FakeTransport(
        {f"127.0.0.1:{9000 + i}": fail(UpstreamConnectError("refused")) for i in range(5)}
    ))  # fmt: skip
    call = rig.call()
    with pytest.raises(UpstreamFailed, match="after 3 attempt"):
        await rig.pipeline.handler(call)
    assert call.attempts == 3 and len(call.tried) == 3


async def test_the_same_client_error_from_two_replicas_ends_the_tries_uncharged() -> None:
    rig = Rig(make_config(), FakeTransport({k: reply(400, b'{"error":"x"}') for k in (A, B, C)}))
    call = rig.call()
    with pytest.raises(RejectedByReplicas, match=r"refused by r\d, r\d \(400\): x") as info:
        await rig.pipeline.handler(call)
    assert info.value.status == 400 and call.attempts == 2  # one second opinion, no more
    assert all(rig.replica(i).failures == 0 for i in range(3))


async def test_a_replica_refusing_what_another_answers_is_charged_until_ejected() -> None:
    """A black hole (4xx to everything, fast) behind P2C: every request still gets its 200,
    and the refusals count against it until it is out of the pool."""
    rig = Rig(make_config(replicas=2), FakeTransport({A: reply(400, b'{"error":"no input x"}')}))
    for _ in range(40):
        result = await rig.run()
        assert result.status == 200 and result.served_by == "r1"
    black_hole = rig.replica(0)
    assert black_hole.failures >= 5 and "where r1 answered" in (black_hole.last_error or "")
    assert rig.registry.pools["p"].outlier.is_ejected(black_hole) or (
        black_hole.breaker.state() == OPEN
    )
    assert len(rig.transport.calls[A]) < 10  # out of the pool after a handful of refusals
    assert rig.replica(1).failures == 0


def _poisoned(poison: bytes) -> Any:
    """Answers 500 to a request whose body is ``poison``, and 200 to every other."""

    async def behave(method: str, path: str, payload: bytes) -> UpstreamResponse:
        if payload == poison:
            return UpstreamResponse(500, {}, b'{"error":"cannot reshape"}')
        return UpstreamResponse(200, {}, b'{"outputs":[]}')

    return behave


async def test_an_input_that_makes_working_replicas_fail_ejects_none_of_them() -> None:
    """The mirror case: the same 500 from two replicas that answer other requests well is
    the request's fault: a 400 with their message, and no replica charged."""
    poison = b'{"poison":1}'
    rig = Rig(make_config(replicas=3), FakeTransport({k: _poisoned(poison) for k in (A, B, C)}))
    served = {(await rig.run()).served_by for _ in range(30)}  # seeded: deterministic
    assert served == {"r0", "r1", "r2"}  # each has answered well
    for _ in range(30):
        assert (await rig.run()).status == 200
        call = rig.call()
        call.body = poison
        with pytest.raises(RejectedByReplicas, match="cannot reshape") as info:
            await rig.pipeline.handler(call)
        assert info.value.status == 400
    assert all(rig.replica(i).failures == 0 for i in range(3))
    assert all(not rig.registry.pools["p"].outlier.is_ejected(rig.replica(i)) for i in range(3))


async def test_a_pool_failing_everything_alike_is_broken_not_asked_wrong() -> None:
    """Every replica 500s on every request (a bad driver): not the request's fault; the
    failures count, breakers open and the pool answers fast 503s (the fallback's cue)."""
    rig = Rig(make_config(replicas=3), FakeTransport({k: reply(500) for k in (A, B, C)}))
    errors: list[type[BaseException]] = []
    for _ in range(30):
        with pytest.raises((RejectedByReplicas, UpstreamFailed, NoReplicaAvailable)) as info:
            await rig.run()
        errors.append(info.type)
    # the first pair of 500s looks like a poison input; from the next request on it is not
    assert errors.count(RejectedByReplicas) <= 1 and RejectedByReplicas not in errors[1:]
    assert all(rig.replica(i).breaker.state() == OPEN for i in range(3))


async def test_backoff_uses_the_injected_clock() -> None:
    rig = Rig(make_config(), FakeTransport({A: reply(503), B: reply(503), C: reply(503)}))
    with pytest.raises(UpstreamFailed):
        await rig.run()
    assert len(rig.clock.slept) == 2 and all(0 <= s <= 0.25 for s in rig.clock.slept)


async def test_retry_budget_bounds_amplification_when_all_fail() -> None:
    budget = {"ratio": 0.2, "min_per_s": 1, "window_s": 10}
    transport = FakeTransport({k: reply(503) for k in (A, B, C)})
    rig = Rig(make_config(retry={"max_attempts": 3}), transport, budget)
    failed = 0
    for _ in range(200):
        try:
            await rig.run()
        except (UpstreamFailed, NoReplicaAvailable):
            failed += 1
    attempts = sum(len(v) for v in transport.calls.values())
    assert failed == 200
    assert attempts <= 1.2 * 200 + 10


async def test_breakers_open_and_the_pool_answers_fast_503() -> None:
    transport = FakeTransport({k: reply(503) for k in (A, B, C)})
    rig = Rig(make_config(), transport)
    errors = []
    for _ in range(30):
        try:
            await rig.run()
        except (UpstreamFailed, NoReplicaAvailable) as exc:
            errors.append(exc)
    assert all(rig.replica(i).breaker.state() == OPEN for i in range(3))
    assert isinstance(errors[-1], NoReplicaAvailable) and errors[-1].status == 503
    before = sum(len(v) for v in transport.calls.values())
    with pytest.raises(NoReplicaAvailable):
        await rig.run()
    assert sum(len(v) for v in transport.calls.values()) == before  # no upstream call at all


async def test_consecutive_failures_eject() -> None:
    rig = Rig(make_config(replicas=4), FakeTransport({A: reply(500)}))
    for _ in range(60):
        await rig.run()
    assert rig.replica(0).ejections >= 1
    assert (
        rig.registry.pools["p"].outlier.is_ejected(rig.replica(0))
        or rig.replica(0).breaker.state() == OPEN
    )


async def test_standby_only_serves_while_an_active_is_down() -> None:
    config = make_config(replicas=3)
    pools = config.model_dump()["pools"]
    pools["p"]["replicas"][2]["standby"] = True
    config = GatewayConfig.model_validate({**config.model_dump(), "pools": pools})
    rig = Rig(config, FakeTransport())
    served = {(await rig.run()).served_by for _ in range(30)}
    assert served == {"r0", "r1"}
    rig.replica(0).healthy = False
    served = {(await rig.run()).served_by for _ in range(30)}
    assert served == {"r1", "r2"}


async def test_admission_sheds_at_once_beyond_the_bound() -> None:
    rig = Rig(
        make_config(admission={"max_in_flight": 2}), FakeTransport({k: hang() for k in (A, B, C)})
    )
    held = [asyncio.create_task(rig.run(timeout_s=5)) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded) as info:
        await rig.run()
    assert info.value.status == 503 and info.value.headers()["retry-after"] == "1"
    for task in held:
        task.cancel()
    await asyncio.gather(*held, return_exceptions=True)
    assert rig.pipeline.admission.in_flight["digits"] == 0


async def test_hedge_after_p95_takes_the_first_good_answer() -> None:
    config = make_config(replicas=2, hedge={"enabled": True, "min_samples": 5, "min_delay_ms": 1})
    rig = Rig(config, FakeTransport({A: hang()}))  # the first copy never answers by itself
    pool = rig.registry.pools["p"]
    for _ in range(10):
        pool.latency.record(0.005)
    rig.replica(1).outstanding = 100  # make P2C pick the hung replica first
    result = await asyncio.wait_for(rig.run(timeout_s=10), 5)  # only the hedge can answer
    assert result.served_by == "r1"
    assert rig.pipeline.hedge.hedges_won == 1
    # the losing copy is cancelled without delaying the answer: nothing else ends a hung try
    # within the 10 s deadline
    await wait_until_async(
        lambda: rig.replica(0).outstanding == 0,
        5,
        interval=0,
        message="the losing copy to be cancelled",
    )


def _prime(rig: Rig, latency_s: float = 0.002, samples: int = 50) -> None:
    for _ in range(samples):
        rig.registry.pools["p"].latency.record(latency_s)


class RealTimeRig(Rig):
    """The speculative try waits on the event loop's time, so these use the real clock."""

    def __init__(self, config: GatewayConfig, transport: FakeTransport) -> None:
        super().__init__(config, transport)
        from gateway.clock import MonotonicClock

        self.clock = MonotonicClock()  # type: ignore[assignment]
        self.registry = Registry(config, self.clock)
        self.budget = RetryBudget(RetryBudgetConfig(), self.clock)
        self.pipeline = build_pipeline(
            self.registry, transport, self.budget, self.clock, random.Random(0)
        )


async def test_a_hung_replica_costs_one_short_try_and_fails_at_the_deadline() -> None:
    rig = RealTimeRig(make_config(replicas=2), FakeTransport({A: hang()}))
    _prime(rig)
    rig.replica(1).outstanding = 50  # P2C tries the hung replica first
    deadline_s = 1.0  # the hung try lasts this long, in the background
    call = rig.call(timeout_s=deadline_s)
    result = await asyncio.wait_for(rig.pipeline.handler(call), deadline_s + 5)
    assert result.served_by == "r1" and result.attempts == 2
    # one short try: the hung replica had the per-try timeout learned from the pool's 2 ms
    # answers (3 x p99, at least min_ms), not the deadline
    [short_try] = [o for o in call.outcomes if o.kind is OutcomeKind.SLOW]
    min_try_s = rig.config.models["digits"].retry.try_timeout.min_ms / 1000
    assert short_try.replica == "r0" and short_try.latency_s == pytest.approx(min_try_s)
    hung = rig.replica(0)
    assert hung.outstanding == 1 and hung.failures == 0  # still waiting in the background
    background = rig.pipeline.attempt.background
    await asyncio.wait_for(asyncio.gather(*background, return_exceptions=True), deadline_s + 5)
    assert hung.outstanding == 0 and hung.failures == 1  # timed out at the deadline: a failure


async def test_a_slow_replica_is_retried_but_not_counted_as_failed() -> None:
    async def slow(method: str, path: str, payload: bytes) -> UpstreamResponse:
        await asyncio.sleep(0.06)  # its answer time: three times the 20 ms per-try timeout
        return UpstreamResponse(200, {}, b'{"outputs":[]}')

    rig = RealTimeRig(make_config(replicas=2), FakeTransport({A: slow}))
    _prime(rig)
    rig.replica(1).outstanding = 50
    result = await asyncio.wait_for(rig.run(timeout_s=5.0), 10)
    assert result.served_by == "r1"
    background = rig.pipeline.attempt.background
    await asyncio.wait_for(asyncio.gather(*background, return_exceptions=True), 5)
    slow_replica = rig.replica(0)
    assert slow_replica.failures == 0 and slow_replica.consecutive_failures == 0
    assert slow_replica.ewma_latency_s >= 0.05


async def test_the_copy_after_a_slow_try_goes_at_once_without_backoff() -> None:
    from gateway.clock import MonotonicClock

    class RecordingClock(MonotonicClock):
        def __init__(self) -> None:
            self.slept: list[float] = []

        async def sleep(self, seconds: float) -> None:
            self.slept.append(seconds)
            await super().sleep(seconds)

    rig = RealTimeRig(make_config(replicas=2), FakeTransport({A: hang()}))
    clock = RecordingClock()
    rig.registry = Registry(rig.config, clock)
    rig.pipeline = build_pipeline(rig.registry, rig.transport, rig.budget, clock, random.Random(0))
    _prime(rig)
    rig.replica(1).outstanding = 50
    result = await asyncio.wait_for(rig.run(timeout_s=5.0), 10)
    assert result.served_by == "r1" and result.attempts == 2
    assert clock.slept == [0.0]
    await rig.pipeline.attempt.aclose()  # the hung try would wait out the deadline

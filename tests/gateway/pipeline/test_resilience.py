"""Retries, budget, breakers, ejection, admission and hedging through the real pipeline,
on a scripted transport and a fake clock (no sleeping)."""

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
from gateway.upstream.breaker import OPEN
from gateway.upstream.registry import Registry
from gateway.upstream.transport import UpstreamResponse
from tests.gateway.conftest import make_config
from tests.gateway.fakes import FakeTransport, fail, hang, reply

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


async def test_an_input_that_makes_one_replica_fail_does_not_eject_a_healthy_one() -> None:
    """The mirror case: the same 500 from two replicas is the request's fault."""
    poison = b'{"error":"cannot reshape"}'
    rig = Rig(make_config(replicas=3), FakeTransport({k: reply(500, poison) for k in (A, B, C)}))
    for _ in range(30):
        with pytest.raises(RejectedByReplicas, match="cannot reshape"):
            await rig.run()
    assert all(rig.replica(i).failures == 0 for i in range(3))
    assert all(not rig.registry.pools["p"].outlier.is_ejected(rig.replica(i)) for i in range(3))


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
    async def slow(method: str, path: str, payload: bytes) -> UpstreamResponse:
        await asyncio.sleep(2)
        return UpstreamResponse(200, {}, b"{}")

    config = make_config(replicas=2, hedge={"enabled": True, "min_samples": 5, "min_delay_ms": 1})
    rig = Rig(config, FakeTransport({A: slow}))
    pool = rig.registry.pools["p"]
    for _ in range(10):
        pool.latency.record(0.005)
    rig.replica(1).outstanding = 100  # make P2C pick the slow replica first
    result = await asyncio.wait_for(rig.run(timeout_s=10), 1.5)
    assert result.served_by == "r1"
    assert rig.pipeline.hedge.hedges_won == 1
    for _ in range(100):  # the losing copy is cancelled without delaying the answer
        if rig.replica(0).outstanding == 0:
            break
        await asyncio.sleep(0)
    assert rig.replica(0).outstanding == 0


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
    result = await asyncio.wait_for(rig.run(timeout_s=0.3), 0.25)
    assert result.served_by == "r1" and result.attempts == 2
    hung = rig.replica(0)
    assert hung.outstanding == 1 and hung.failures == 0  # still waiting in the background
    background = rig.pipeline.attempt.background
    await asyncio.wait_for(asyncio.gather(*background, return_exceptions=True), 1)
    assert hung.outstanding == 0 and hung.failures == 1  # timed out at the deadline: a failure


async def test_a_slow_replica_is_retried_but_not_counted_as_failed() -> None:
    async def slow(method: str, path: str, payload: bytes) -> UpstreamResponse:
        await asyncio.sleep(0.06)
        return UpstreamResponse(200, {}, b'{"outputs":[]}')

    rig = RealTimeRig(make_config(replicas=2), FakeTransport({A: slow}))
    _prime(rig)
    rig.replica(1).outstanding = 50
    result = await asyncio.wait_for(rig.run(timeout_s=1.0), 0.5)
    assert result.served_by == "r1"
    background = rig.pipeline.attempt.background
    await asyncio.wait_for(asyncio.gather(*background, return_exceptions=True), 1)
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
    result = await asyncio.wait_for(rig.run(timeout_s=0.3), 0.25)
    assert result.served_by == "r1" and result.attempts == 2
    assert clock.slept == [0.0]
    await asyncio.wait_for(
        asyncio.gather(*rig.pipeline.attempt.background, return_exceptions=True), 1
    )

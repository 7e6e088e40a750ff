"""The in-flight byte budget: admits what fits, queues in order, refuses after its wait."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import Overloaded
from gateway.policies.byte_budget import LARGE_BODY_BYTES, InflightBytes, machine_default
from gateway.policies.heap_trim import HeapTrim


async def test_bytes_that_fit_are_held_at_once_and_given_back() -> None:
    budget = InflightBytes(100, wait_s=1.0)
    await budget.take(60)
    await budget.take(40)
    assert budget.held == 100 and budget.peak == 100
    budget.give(100)
    assert budget.held == 0


async def test_one_request_alone_is_admitted_even_over_the_budget() -> None:
    budget = InflightBytes(100, wait_s=0.0)
    await budget.take(500)  # under the body cap, so never refused for the budget alone
    assert budget.held == 500


async def test_a_waiter_is_admitted_in_order_when_bytes_come_back() -> None:
    budget = InflightBytes(100, wait_s=60.0)
    await budget.take(80)
    first = asyncio.ensure_future(budget.take(50))
    second = asyncio.ensure_future(budget.take(10))  # fits, but may not pass the first
    await asyncio.sleep(0)
    assert not first.done() and not second.done()
    budget.give(80)
    await asyncio.gather(first, second)
    assert budget.held == 60


async def test_a_request_that_never_fits_in_its_wait_gets_503_with_retry_after() -> None:
    budget = InflightBytes(100, wait_s=0.0)
    await budget.take(80)
    with pytest.raises(Overloaded) as info:
        await budget.take(50)
    assert info.value.status == 503 and info.value.headers()["retry-after"] == "1"
    assert "server.inflight_bytes=100" in str(info.value) and budget.refused == 1
    assert budget.held == 80


async def test_a_waiter_whose_client_left_leaves_the_queue_and_lets_the_next_one_in() -> None:
    budget = InflightBytes(100, wait_s=60.0)
    await budget.take(90)
    big = asyncio.ensure_future(budget.take(100))
    await asyncio.sleep(0)
    small = asyncio.ensure_future(budget.take(5))
    await asyncio.sleep(0)
    big.cancel()  # its client went away while it waited
    with pytest.raises(asyncio.CancelledError):
        await big
    budget.give(0)  # any give wakes the queue
    await small
    assert budget.held == 95


async def test_answers_are_counted_without_waiting_and_hold_new_requests_back() -> None:
    budget = InflightBytes(100, wait_s=0.0)
    await budget.take(10)
    budget.add(95)  # an answer in memory
    with pytest.raises(Overloaded):
        await budget.take(10)


def test_the_default_is_sized_to_the_machine() -> None:
    assert 64 << 20 <= machine_default() <= 1 << 30


async def test_a_drain_after_a_large_burst_calls_drained_once() -> None:
    drains: list[int] = []
    budget = InflightBytes(100, wait_s=0.0, drained=lambda: drains.append(budget.held),
                           burst_bytes=50)  # fmt: skip
    await budget.take(30)
    budget.give(30)
    assert drains == []  # a small burst: nothing to give back
    await budget.take(40)
    budget.add(20)  # its answer
    budget.give(40)
    assert drains == []  # not drained yet
    budget.give(20)
    assert drains == [0]
    await budget.take(10)
    budget.give(10)
    assert drains == [0]  # the burst was counted once


def test_the_heap_trim_runs_here() -> None:
    trim = HeapTrim()
    trim.now()
    assert trim.trims == (1 if trim.available else 0)


async def test_a_drain_schedules_one_trim_soon_and_one_later() -> None:
    trim = HeapTrim(delay_s=60.0, late_s=60.0)
    if not trim.available:
        pytest.skip("not glibc: nothing to trim")
    trim.soon()
    first = trim._due
    trim.soon()  # a second drain meanwhile: still one trim due
    assert first is not None and trim._due is first
    first.cancel()
    trim._start(True)  # the first fires: the late one is due next
    late = trim._due
    assert late is not None and late is not first
    late.cancel()
    trim._start(False)
    assert trim._due is None


async def test_a_budget_that_never_holds_the_burst_size_drains_at_half_its_limit() -> None:
    drains: list[int] = []
    budget = InflightBytes(16, wait_s=0.0, drained=lambda: drains.append(budget.held),
                           burst_bytes=1000)  # fmt: skip
    await budget.take(7)
    budget.give(7)
    assert drains == []  # under half the limit
    await budget.take(6)
    await budget.take(6)  # 12 of 16: a third would not fit, so 1000 is never reached
    budget.give(6)
    budget.give(6)
    assert drains == [0]


async def test_large_answers_one_after_the_other_call_drained_once_they_add_up() -> None:
    """15 MiB answers written one at a time never hold a 16 MiB burst, but free as much as
    one: the second one's drain calls ``drained``. Small bodies never add up to it."""
    drains: list[int] = []
    budget = InflightBytes(1 << 30, wait_s=0.0, drained=lambda: drains.append(budget.held))
    answer = 15 << 20
    for _ in range(1000):  # small ones: under LARGE_BODY_BYTES each, however many
        budget.add(LARGE_BODY_BYTES - 1)
        budget.give(LARGE_BODY_BYTES - 1)
    assert drains == []
    budget.add(answer)
    budget.give(answer)
    assert drains == []  # 15 MiB given back: not yet
    budget.add(answer)
    budget.give(answer)
    assert drains == [0]
    budget.add(answer)
    budget.give(answer)
    assert drains == [0]  # counted afresh after each call

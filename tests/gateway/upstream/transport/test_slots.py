"""The HTTP/1.1 pool's exchange slots: taken in order, never lost to a timeout or a cancel."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import UpstreamTimeout
from gateway.upstream.transport.http1 import _Route, _wait_for_slot


def _far() -> float:
    return asyncio.get_running_loop().time() + 30.0


async def test_waiters_get_freed_slots_in_the_order_they_came() -> None:
    route = _Route(0)
    order: list[int] = []

    async def wait(n: int) -> None:
        await _wait_for_slot(route, _far())
        order.append(n)

    tasks = [asyncio.create_task(wait(n)) for n in range(3)]
    await asyncio.sleep(0)
    for _ in range(3):
        route.give_back()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert route.free == 0 and not route.waiters


async def test_a_slot_handed_to_a_waiter_cancelled_before_it_ran_is_passed_on() -> None:
    route = _Route(0)
    first = asyncio.create_task(_wait_for_slot(route, _far()))
    second = asyncio.create_task(_wait_for_slot(route, _far()))
    await asyncio.sleep(0)
    route.give_back()  # to ``first``, which is cancelled before it resumes
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5.0)  # got the slot ``first`` could not use
    assert route.free == 0
    route.give_back()
    assert route.free == 1 and not route.waiters


async def test_a_waiter_past_its_deadline_fails_and_leaves_no_slot_taken() -> None:
    route = _Route(0)
    loop = asyncio.get_running_loop()
    with pytest.raises(UpstreamTimeout, match="all busy"):
        await _wait_for_slot(route, loop.time() + 0.01)
    route.give_back()  # the timed-out waiter is skipped: the slot is counted free
    assert route.free == 1 and not route.waiters

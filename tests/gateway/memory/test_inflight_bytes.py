"""The in-flight bytes: admits what fits, queues in order, refuses after its wait; keeps
a part for small requests and holds one address to its share while others wait."""

from __future__ import annotations

import asyncio

import pytest

from gateway.errors import Overloaded
from gateway.memory.heap_trim import HeapTrim
from gateway.memory.inflight_bytes import (
    LARGE_BODY_BYTES,
    BudgetLevels,
    Hold,
    InflightBytes,
    machine_default,
)
from gateway.memory.peer_share import OTHERS, PeerShares, peer_host


async def take(budget: InflightBytes, size: int, peer: str = "10.0.0.1") -> Hold:
    """A new holder of ``size`` bytes from ``peer`` (waiting as a body does)."""
    hold = Hold(peer)
    await budget.wait(hold, size)
    return hold


async def test_bytes_that_fit_are_held_at_once_and_given_back() -> None:
    budget = InflightBytes(100, wait_s=1.0)
    assert budget.fits(60)
    budget.add(60)
    hold = await take(budget, 40)
    assert budget.held == 100 and budget.peak == 100 and hold.held == 40
    budget.give(60)
    budget.release(hold)
    assert budget.held == 0 and hold.held == 0


async def test_one_request_alone_is_admitted_even_over_the_budget() -> None:
    budget = InflightBytes(100, wait_s=0.0, small_bytes=10)
    hold = await take(budget, 500)  # under the body cap, so never refused for the budget alone
    assert budget.held == 500 and budget.large == 500
    assert budget.hold(hold, 900)  # alone, it may grow too


async def test_a_waiter_is_admitted_in_order_when_bytes_come_back() -> None:
    budget = InflightBytes(100, wait_s=60.0)
    first_hold = await take(budget, 80)
    first = asyncio.ensure_future(take(budget, 50))
    second = asyncio.ensure_future(take(budget, 10))  # fits, but may not pass the first
    await asyncio.sleep(0)
    assert not first.done() and not second.done()
    budget.release(first_hold)
    await asyncio.gather(first, second)
    assert budget.held == 60


async def test_a_request_that_never_fits_in_its_wait_gets_503_with_retry_after() -> None:
    budget = InflightBytes(100, wait_s=0.0)
    await take(budget, 80)
    hold = Hold("10.0.0.1")
    with pytest.raises(Overloaded) as info:
        await budget.wait(hold, 50)
    assert info.value.status == 503 and info.value.headers()["retry-after"] == "1"
    assert "server.inflight_bytes=100" in str(info.value) and budget.refused == 1
    assert budget.held == 80 and hold.held == 0


async def test_its_levels_say_what_is_held_waiting_refused_and_reclaimed() -> None:
    """What /metrics shows of it (`BudgetLevels`): one held, one waiting, then refused."""
    budget = InflightBytes(100, wait_s=0.05)
    assert budget.levels() == BudgetLevels(0, 0, 0, 0, 100)
    await take(budget, 80)
    late = asyncio.ensure_future(take(budget, 50))
    await asyncio.sleep(0)
    assert budget.levels() == BudgetLevels(80, 1, 0, 0, 100)
    with pytest.raises(Overloaded):
        await late
    assert budget.levels() == BudgetLevels(80, 0, 1, 0, 100)


async def test_a_waiter_whose_client_left_leaves_the_queue_and_lets_the_next_one_in() -> None:
    budget = InflightBytes(100, wait_s=60.0)
    await take(budget, 90)
    big = asyncio.ensure_future(take(budget, 100))
    await asyncio.sleep(0)
    small = asyncio.ensure_future(take(budget, 5))
    await asyncio.sleep(0)
    big.cancel()  # its client went away while it waited
    with pytest.raises(asyncio.CancelledError):
        await big
    budget.give(0)  # any give wakes the queue
    await small
    assert budget.held == 95


async def test_answers_are_counted_without_waiting_and_hold_new_requests_back() -> None:
    budget = InflightBytes(100, wait_s=0.0)
    hold = await take(budget, 10)
    budget.settle(hold, 105)  # its answer, in memory
    assert budget.held == 105 and hold.held == 105
    with pytest.raises(Overloaded):
        await take(budget, 10)
    budget.release(hold, keep=95)  # its body goes; its answer is not written yet
    assert budget.held == 95 and hold.held == 95
    budget.release(hold)
    assert budget.held == 0


async def test_a_body_holds_what_arrived_and_grows_as_more_does() -> None:
    budget = InflightBytes(1000, wait_s=0.0, small_bytes=10)
    hold = await take(budget, 100)  # one read's worth of a body that declared far more
    assert budget.hold(hold, 300)  # 200 arrived: room for the next read
    assert hold.held == 300 and budget.large == 300
    budget.settle(hold, 250)  # read whole: its size
    assert budget.held == budget.large == 250
    budget.release(hold)
    assert budget.held == budget.large == 0 and not len(budget.peers)


async def test_large_requests_never_hold_the_part_kept_for_small_ones() -> None:
    budget = InflightBytes(1000, wait_s=0.0, small_bytes=10, small_reserve=0.2)
    big = await take(budget, 700, "10.0.0.9")
    with pytest.raises(Overloaded):
        await take(budget, 150, "10.0.0.1")  # 850 would reach into the kept 200
    assert budget.large == 700
    for _ in range(30):  # small requests find the kept part, and the rest
        assert budget.fits(10)
        budget.add(10)
    assert budget.held == 1000 and not budget.fits(10)
    budget.release(big)
    assert budget.fits(10)


async def test_an_address_over_its_share_waits_behind_another_address() -> None:
    budget = InflightBytes(1000, wait_s=60.0, small_bytes=10, peer_share=0.3)
    greedy = [await take(budget, 200, "10.0.0.9") for _ in range(4)]  # alone: 800, over 300
    other = asyncio.ensure_future(take(budget, 300, "10.0.0.1"))
    await asyncio.sleep(0)
    more = asyncio.ensure_future(take(budget, 200, "10.0.0.9"))  # fits, but others wait
    await asyncio.sleep(0)
    assert not other.done() and not more.done()
    budget.release(greedy[0])
    await other  # room for one of them: the other address's
    assert not more.done() and budget.held == 900
    budget.release(greedy[1])
    await more  # nobody else waits now
    assert budget.held == 900


async def test_a_waiter_over_its_share_keeps_no_one_behind_it_from_room_that_frees() -> None:
    budget = InflightBytes(1000, wait_s=60.0, small_bytes=10, peer_share=0.3)
    greedy = [await take(budget, 250, "10.0.0.9") for _ in range(4)]  # alone: all of it
    big = asyncio.ensure_future(take(budget, 400, "10.0.0.9"))  # first in line
    await asyncio.sleep(0)
    other = asyncio.ensure_future(take(budget, 200, "10.0.0.1"))
    await asyncio.sleep(0)
    budget.release(greedy[0])  # room for the other, not for the one ahead of it
    await other
    assert not big.done() and budget.held == 950
    big.cancel()
    await asyncio.gather(big, return_exceptions=True)


def test_the_share_is_at_least_the_floor() -> None:
    assert InflightBytes(1000, 0.0, peer_share=0.1, peer_floor=400).peer_bytes == 400
    assert InflightBytes(1000, 0.0, peer_share=0.5, peer_floor=400).peer_bytes == 500


async def test_a_small_request_that_grows_large_counts_to_its_address() -> None:
    budget = InflightBytes(1000, wait_s=0.0, small_bytes=10)
    hold = await take(budget, 5, "ipv4:10.0.0.3:4000")
    assert hold.account is None and budget.large == 0
    budget.settle(hold, 50)  # a large answer
    assert hold.account is not None and hold.account.key == "10.0.0.3"
    assert hold.account.held == budget.large == 50
    budget.release(hold)
    assert hold.account is None and not len(budget.peers)


def test_the_table_of_addresses_is_bounded_and_forgets_those_that_hold_nothing() -> None:
    peers = PeerShares(most=2)
    a, b = peers.enter("10.0.0.1"), peers.enter("10.0.0.2")
    c, d = peers.enter("10.0.0.3"), peers.enter("10.0.0.4")
    assert c is d and c.key == OTHERS and c.holders == 2 and len(peers) == 3
    assert peers.enter("10.0.0.1") is a and a.holders == 2
    a.holders = 0  # its requests counted themselves out
    assert list(peers) == [b, c] and peers.enter("10.0.0.1") is a  # kept while there is room
    a.holders = 0
    e = peers.enter("10.0.0.5")  # full: the idle account goes, the new address takes its place
    assert e.key == "10.0.0.5" and list(peers) == [b, e, c]


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("::1", "::1"),
        ("ipv4:10.0.0.1:5000", "10.0.0.1"),
        ("ipv6:[::1]:5000", "::1"),
        ("unix:/tmp/socket", "unix:/tmp/socket"),
        ("", ""),
    ],
)
def test_the_address_is_read_from_either_doors_form(peer: str, host: str) -> None:
    assert peer_host(peer) == host


def test_the_default_is_sized_to_the_machine() -> None:
    assert 64 << 20 <= machine_default() <= 1 << 30


async def test_emptying_after_a_large_burst_calls_emptied_once() -> None:
    drains: list[int] = []
    budget = InflightBytes(
        100, wait_s=0.0, emptied=lambda: drains.append(budget.held), burst_bytes=50
    )
    hold = await take(budget, 30)
    budget.release(hold)
    assert drains == []  # a small burst: nothing to give back
    hold = await take(budget, 40)
    budget.settle(hold, 60)  # its answer
    budget.release(hold, keep=20)
    assert drains == []  # not emptied yet
    budget.release(hold)
    assert drains == [0]
    hold = await take(budget, 10)
    budget.release(hold)
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
    budget = InflightBytes(
        16, wait_s=0.0, emptied=lambda: drains.append(budget.held), burst_bytes=1000
    )
    hold = await take(budget, 7)
    budget.release(hold)
    assert drains == []  # under half the limit
    first, second = await take(budget, 6), await take(budget, 6)  # 12 of 16: no third
    budget.release(first)
    budget.release(second)
    assert drains == [0]


async def test_large_answers_one_after_the_other_call_emptied_once_they_add_up() -> None:
    """15 MiB answers written one at a time never hold a 16 MiB burst, but free as much as
    one: emptying after the second one calls ``emptied``. Small bodies never add up to it."""
    drains: list[int] = []
    budget = InflightBytes(1 << 30, wait_s=0.0, emptied=lambda: drains.append(budget.held))
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


class Asker(Hold):
    """A request whose answer is held before it is read (as the edge's `Arrival`)."""

    __slots__ = ("answer_held",)

    def __init__(self, peer: str = "10.0.0.1") -> None:
        super().__init__(peer)
        self.answer_held = 0


async def asking(budget: InflightBytes, body: int, peer: str = "10.0.0.1") -> Asker:
    """A request from ``peer`` whose ``body`` bytes are held."""
    asker = Asker(peer)
    await budget.wait(asker, body)
    return asker


async def test_an_answer_is_held_before_it_is_read_as_a_large_request() -> None:
    budget = InflightBytes(1000, wait_s=0.0, small_bytes=10)
    asker = await asking(budget, 5)  # a small body
    assert budget.hold_answer(asker, 300)  # its reply's Content-Length
    assert asker.held == 305 and asker.answer_held == 300
    assert budget.large == 305 and asker.account is not None  # it counts to its address
    # a retry's or a hedge's smaller reply: the room held is the request's, for its largest
    assert budget.hold_answer(asker, 200)
    await budget.wait_answer(asker, 300)
    assert asker.held == 305 and budget.held == 305
    # the edge: the answer as written, in place of the room its reply was given
    budget.settle(asker, asker.held - asker.answer_held + 290)
    assert budget.held == budget.large == 295
    budget.release(asker)
    assert budget.held == budget.large == 0 and not len(budget.peers)


async def test_answers_that_arrive_together_wait_their_turn_for_room() -> None:
    budget = InflightBytes(1000, wait_s=60.0, small_bytes=10, small_reserve=0.2)
    first, second, third = [await asking(budget, 5) for _ in range(3)]
    assert budget.hold_answer(first, 500)
    # 500 more would reach into the part kept for small requests: not now
    assert not budget.hold_answer(second, 500)
    assert second.held == 5 and second.answer_held == 0
    waiting = asyncio.ensure_future(budget.wait_answer(second, 500))
    await asyncio.sleep(0)
    behind = asyncio.ensure_future(budget.wait_answer(third, 100))  # fits, but comes after
    await asyncio.sleep(0)
    assert not waiting.done() and not behind.done()
    # small requests still find the kept part while the answers wait
    assert budget.fits(10)
    budget.release(first)  # its answer written
    await asyncio.gather(waiting, behind)
    assert second.answer_held == 500 and third.answer_held == 100
    assert budget.held == budget.large == 610


async def test_an_answer_with_no_room_within_the_wait_is_refused_with_503() -> None:
    budget = InflightBytes(1000, wait_s=0.0, small_bytes=10, small_reserve=0.2)
    held = await asking(budget, 5)
    assert budget.hold_answer(held, 700)
    asker = await asking(budget, 5)
    with pytest.raises(Overloaded) as info:
        await budget.wait_answer(asker, 200)  # 905 would reach into the kept 200
    assert info.value.headers()["retry-after"] == "1" and budget.refused == 1
    # the request keeps its body's hold, and holds no answer
    assert asker.held == 5 and asker.answer_held == 0
    assert budget.held == budget.large == 710  # it asked as a large request


async def test_answers_held_past_their_share_leave_small_requests_the_kept_part() -> None:
    budget = InflightBytes(1000, wait_s=0.0, small_bytes=10, small_reserve=0.2)
    askers = [await asking(budget, 5) for _ in range(4)]
    assert [budget.hold_answer(asker, 195) for asker in askers] == [True] * 4
    assert not budget.hold_answer(await asking(budget, 5), 195)
    for _ in range(19):  # the kept 200, less the bodies
        assert budget.fits(10)
        budget.add(10)


async def test_a_request_that_ends_while_its_answer_waits_is_granted_nothing() -> None:
    budget = InflightBytes(1000, wait_s=60.0, small_bytes=10, small_reserve=0.2)
    first = await asking(budget, 5)
    assert budget.hold_answer(first, 700)
    late = await asking(budget, 5)  # a try that outlives its request
    waiting = asyncio.ensure_future(budget.wait_answer(late, 300))
    await asyncio.sleep(0)
    behind = asyncio.ensure_future(budget.wait_answer(await asking(budget, 5), 50))
    await asyncio.sleep(0)
    budget.release(late)  # its request is done
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await behind  # no longer behind it
    budget.release(first)
    assert late.held == 0 and late.account is None and budget.held == budget.large == 55

"""The clocks: the real one's timers on the event loop, the manual fake's on ``advance``."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from gateway.clock import MonotonicClock, wait_first
from tests.support.clock import FakeClock


async def test_fake_timers_fire_in_order_each_at_its_time_as_time_passes() -> None:
    clock = FakeClock(start=0.0)
    fired: list[tuple[str, float]] = []
    clock.call_at(2.0, lambda: fired.append(("b", clock.now())))
    clock.call_at(1.0, lambda: fired.append(("a", clock.now())))
    clock.call_at(2.0, lambda: fired.append(("c", clock.now())))
    clock.call_at(9.0, lambda: fired.append(("late", clock.now()))).cancel()
    clock.advance(0.5)
    assert fired == []
    clock.advance(9.5)
    assert fired == [("a", 1.0), ("b", 2.0), ("c", 2.0)] and clock.now() == 10.0
    assert clock.next_timer() is None


async def test_a_fake_timer_already_due_fires_at_the_next_turn_of_the_loop() -> None:
    clock = FakeClock()
    fired: list[float] = []
    clock.call_at(clock.now(), lambda: fired.append(clock.now()))
    assert fired == []
    await asyncio.sleep(0)
    assert fired == [clock.now()]


async def test_fake_sleep_advances_at_once_and_fires_what_it_passes() -> None:
    clock = FakeClock(start=0.0)
    fired: list[float] = []
    clock.call_at(0.5, lambda: fired.append(clock.now()))
    await clock.sleep(2)
    assert clock.now() == 2.0 and fired == [0.5] and clock.slept == [2]


async def test_fake_timeout_at_expires_when_time_passes_it() -> None:
    clock = FakeClock(start=0.0)
    never = asyncio.Event()

    async def wait() -> None:
        async with clock.timeout_at(1.0):
            await never.wait()

    task = asyncio.create_task(wait())
    await asyncio.sleep(0)
    clock.advance(0.999)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(0.001)
    with pytest.raises(TimeoutError):
        await task


async def test_a_scope_left_in_time_is_not_cancelled_later() -> None:
    clock = FakeClock(start=0.0)
    async with clock.timeout_at(1.0):
        pass
    clock.advance(2)
    await asyncio.sleep(0)  # nothing to cancel: the timer went with the scope


async def test_wait_first_returns_on_the_first_done_future_and_cancels_nothing() -> None:
    clock = MonotonicClock()
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    loop.call_soon(first.set_result, 1)
    await wait_first(clock, [first, second], clock.now() + 60)
    assert first.done() and not second.done() and not second.cancelled()


async def test_wait_first_returns_at_the_time_limit() -> None:
    clock = MonotonicClock()
    never = asyncio.get_running_loop().create_future()
    await wait_first(clock, [never], clock.now() - 1)  # already past: at the loop's next turn
    assert not never.done()


async def test_the_real_timeout_at_is_asyncio_timeout_on_the_monotonic_clock() -> None:
    clock = MonotonicClock()
    with pytest.raises(TimeoutError):
        async with clock.timeout_at(clock.now() - 1):
            await asyncio.Event().wait()
    fired = asyncio.Event()
    clock.call_at(clock.now(), fired.set)
    await asyncio.wait_for(fired.wait(), 5)


def test_real_timers_never_fire_before_now_reaches_their_time_on_uvloop() -> None:
    """uvloop's timers count whole milliseconds and fire up to ~1 ms early by `time.monotonic`;
    a deadline whose timer fired must read as passed, so the clock puts early timers back."""

    async def main() -> list[str]:
        clock = MonotonicClock()
        early: list[str] = []
        for i in range(40):
            when = clock.now() + 0.0003 + i * 0.00011
            fired = asyncio.Event()

            def fire(when: float = when, fired: asyncio.Event = fired) -> None:
                if clock.now() < when:
                    early.append(f"timer {when - clock.now():.6f} s early")
                fired.set()

            clock.call_at(when, fire)
            await fired.wait()
            until = clock.now() + 0.0004 + i * 0.00007
            with pytest.raises(TimeoutError):
                async with clock.timeout_at(until):
                    await asyncio.Event().wait()
            if clock.now() < until:
                early.append(f"timeout {until - clock.now():.6f} s early")
        return early

    assert uvloop.run(main()) == []


def test_the_real_timeout_scope_keeps_asyncios_semantics_on_uvloop() -> None:
    """An expired scope raises TimeoutError; a cancellation from outside stays a
    CancelledError; a scope left in time cancels nothing later."""

    async def main() -> list[str]:
        clock = MonotonicClock()
        seen: list[str] = []
        try:
            async with clock.timeout_at(clock.now() + 0.002):
                await asyncio.Event().wait()
        except TimeoutError:
            seen.append("timeout")

        async def victim() -> None:
            async with clock.timeout_at(clock.now() + 60):
                await asyncio.Event().wait()

        task = asyncio.ensure_future(victim())
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            seen.append("cancelled")
        async with clock.timeout_at(clock.now() + 0.001):
            pass
        await asyncio.sleep(0.005)  # past the scope's time: nothing fires
        seen.append("left in time")
        return seen

    assert uvloop.run(main()) == ["timeout", "cancelled", "left in time"]


def test_real_timeout_scopes_share_a_timer_each_expiring_at_its_own_time() -> None:
    """Scopes under one loop timer: each expires at its own time and never before it, scopes
    that end in time (in any order) cancel nothing, and ended ones do not pile up."""

    async def main() -> tuple[list[str], int]:
        clock = MonotonicClock()

        async def scoped(seconds: float, hold: float) -> str:
            until = clock.now() + seconds
            try:
                async with clock.timeout_at(until):
                    await asyncio.sleep(hold)
            except TimeoutError:
                return "expired" if clock.now() >= until else "early"
            return "ended"

        # the scopes that end in time are given deadlines a starved machine cannot reach
        many = [scoped(60.0, 0.001 * (i % 7)) for i in range(300)]
        results = await asyncio.gather(
            scoped(30.0, 0.0), scoped(0.02, 30.0), scoped(0.05, 30.0), scoped(20.0, 0.01), *many
        )
        scopes = clock._scopes
        assert scopes is not None
        return results[:4] + sorted(set(results[4:])), len(scopes._heap)

    results, left = uvloop.run(main())
    assert results == ["ended", "expired", "expired", "ended", "ended"]
    assert left == 0

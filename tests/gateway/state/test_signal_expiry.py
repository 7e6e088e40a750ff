"""Signals expire in every store (memory, one Redis, a Cluster), and expiry never reorders them.

A signal lives until `SIGNAL_TTL_S` after the later of its stamp and its ejection's end. The
tests stamp signals about an hour back, so that they expire within a second or two: Redis
expires by its own clock (the real one), the memory store by the fake clock, which the waits
below move instead of sleeping. Every wait is bounded by time and ends on a condition.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import redis.asyncio as redis

from gateway.state.base import SIGNAL_TTL_S, Pulled, PushBatch, ReplicaSignal, StateStore
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore
from tests.support.clock import FakeClock
from tests.support.redis_server import TEST_TIMEOUT_S, RedisServer, new_namespace

WAIT_BOUND_S = 10.0  # for what must happen within a second or two, on a busy CI machine
SOON_S = 1.0  # a signal that is to expire during a test does so this long after it starts
LATER_S = 3.0  # the same, where more than one call must land before it does


def _signal(
    rid: str, epoch: int, stamp: float, *, origin: str = "a", until: float = 0.0
) -> ReplicaSignal:
    return ReplicaSignal(rid, "open", until, epoch, origin, stamp)


def _ago(clock: FakeClock, seconds_left: float) -> float:
    """A stamp whose signal (no ejection) expires ``seconds_left`` from the test's start."""
    return clock.wall() - SIGNAL_TTL_S + seconds_left


async def _wait_past(store: StateStore, clock: FakeClock, wall: float) -> None:
    """Until the store's time is past ``wall``: the fake clock moves for the memory store;
    Redis's is the real clock, polled."""
    if isinstance(store, MemoryStore):
        clock.advance(max(0.0, wall - clock.wall()) + 0.001)
        return
    deadline = time.monotonic() + WAIT_BOUND_S
    while time.time() <= wall + 0.002:  # Redis counts whole milliseconds
        assert time.monotonic() < deadline, f"the clock did not pass {wall}"
        await asyncio.sleep(0.01)


async def _pull_until(
    store: StateStore, clock: FakeClock, done: Callable[[Pulled], bool]
) -> Pulled:
    """Pulls until ``done`` holds (bounded by time); the memory store's clock moves meanwhile."""
    deadline = time.monotonic() + WAIT_BOUND_S
    while True:
        snapshot = await store.pull()
        if done(snapshot):
            return snapshot
        assert time.monotonic() < deadline, f"no such pull within {WAIT_BOUND_S} s: {snapshot}"
        clock.advance(0.05)
        await asyncio.sleep(0.01)


async def test_a_signal_offered_already_expired_is_dropped(
    store: StateStore, clock: FakeClock
) -> None:
    dead = _signal("r-dead", 9, _ago(clock, -1.0))
    ejected = _signal("r-ejected", 1, _ago(clock, -60.0), until=clock.wall() + 30.0)
    fresh = _signal("r-fresh", 1, clock.wall())
    result = await store.push(PushBatch("a", 1, signals=(dead, ejected, fresh)))
    assert result.stale == ()  # dropped, not refused as stale
    signals = (await store.pull()).signals
    assert signals == {"r-ejected": ejected, "r-fresh": fresh}  # an ejection keeps it alive


async def test_an_expired_signal_leaves_the_pull_and_a_fresh_one_stays(
    store: StateStore, clock: FakeClock
) -> None:
    old = _signal("r-old", 3, _ago(clock, SOON_S))
    fresh = _signal("r-fresh", 1, clock.wall())
    await store.push(PushBatch("a", 1, signals=(old, fresh)))
    first = set((await store.pull()).signals)
    if isinstance(store, MemoryStore) or time.time() < old.expires_at():
        assert first == {"r-old", "r-fresh"}  # pulled before it expired (by Redis's clock)
    else:
        assert first >= {"r-fresh"}  # a starved machine took past its expiry to get here
    later = await _pull_until(store, clock, lambda s: "r-old" not in s.signals)
    assert later.signals == {"r-fresh": fresh}


async def test_expiry_never_lets_an_older_signal_win(store: StateStore, clock: FakeClock) -> None:
    soon = LATER_S  # two pushes must land before the newer expires: a starved Cluster is slow
    t0 = clock.wall()
    newer = _signal("r1", 2, _ago(clock, soon), origin="b")
    # older by epoch, but it lives longer: its ejection ended later than the newer's stamp
    older = _signal("r1", 1, _ago(clock, 0.5), origin="a", until=_ago(clock, 2 * soon))
    await store.push(PushBatch("b", 1, signals=(newer,)))
    assert (await store.push(PushBatch("a", 1, signals=(older,)))).stale == ("r1",)
    await _wait_past(store, clock, t0 + soon)  # the newer has expired, the older has not
    assert (await store.push(PushBatch("a", 2, signals=(older,)))).stale == ("r1",)
    assert (await store.pull()).signals["r1"] == newer  # kept for its order, not applied
    await _wait_past(store, clock, t0 + 2 * soon)  # now both have: the entry goes
    assert (await store.push(PushBatch("a", 3, signals=(older,)))).stale == ()
    assert "r1" not in (await store.pull()).signals  # the older one did not come back


async def test_after_an_entry_expires_epochs_start_afresh(
    store: StateStore, clock: FakeClock
) -> None:
    t0 = clock.wall()
    await store.push(PushBatch("b", 1, signals=(_signal("r1", 7, _ago(clock, SOON_S)),)))
    await _wait_past(store, clock, t0 + SOON_S)
    restart = _signal("r1", 1, clock.wall(), origin="a")  # a gateway that forgot epoch 7
    assert (await store.push(PushBatch("a", 1, signals=(restart,)))).stale == ()
    assert (await store.pull()).signals == {"r1": restart}
    stale = _signal("r1", 1, clock.wall() - 1.0, origin="b")  # still ordered against it
    assert (await store.push(PushBatch("b", 2, signals=(stale,)))).stale == ("r1",)
    newer = _signal("r1", 2, clock.wall(), origin="b")
    assert (await store.push(PushBatch("b", 3, signals=(newer,)))).stale == ()
    assert (await store.pull()).signals == {"r1": newer}


# --- Redis itself ---------------------------------------------------------------------------


async def test_redis_deletes_an_expired_signal_and_its_expiry(
    shared_redis: RedisServer, clock: FakeClock
) -> None:
    ns = new_namespace()
    store = RedisStore(shared_redis.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S)
    raw = redis.Redis.from_url(shared_redis.url, decode_responses=True)
    try:
        old = _signal("r-old", 1, _ago(clock, SOON_S))
        fresh = _signal("r-fresh", 1, clock.wall())
        await store.push(PushBatch("a", 1, signals=(old, fresh)))
        assert await raw.zscore(f"{{{ns}}}:sexp", "r-old") == int(old.expires_at() * 1000)
        await _pull_until(store, clock, lambda s: "r-old" not in s.signals)
        assert await raw.hkeys(f"{{{ns}}}:sig") == ["r-fresh"]
        assert await raw.zrange(f"{{{ns}}}:sexp", 0, -1) == ["r-fresh"]
    finally:
        await raw.aclose()
        await store.close()


async def test_signals_stored_by_the_previous_scripts_get_an_expiry_and_still_order(
    shared_redis: RedisServer, clock: FakeClock
) -> None:
    """Mid-upgrade: old gateways HSET signals and never write ``{N}:sexp``."""
    ns = new_namespace()
    store = RedisStore(shared_redis.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S)
    raw = redis.Redis.from_url(shared_redis.url, decode_responses=True)
    legacy = {
        "r-gone": _signal("r-gone", 4, clock.wall() - 30 * 86_400),  # from a month ago
        "r-live": _signal("r-live", 5, clock.wall(), origin="old-gw"),
    }
    try:
        await raw.hset(f"{{{ns}}}:sig", mapping={k: s.encode() for k, s in legacy.items()})
        older = _signal("r-live", 4, clock.wall(), origin="new-gw")
        assert (await store.push(PushBatch("new", 1, signals=(older,)))).stale == ("r-live",)
        first = await store.pull()  # gives r-gone its (past) expiry, prunes it next time
        assert first.signals["r-live"] == legacy["r-live"]
        later = await _pull_until(store, clock, lambda s: "r-gone" not in s.signals)
        assert later.signals == {"r-live": legacy["r-live"]}
        assert await raw.hkeys(f"{{{ns}}}:sig") == ["r-live"]
        assert await raw.zscore(f"{{{ns}}}:sexp", "r-live") == int(
            legacy["r-live"].expires_at() * 1000
        )
    finally:
        await raw.aclose()
        await store.close()

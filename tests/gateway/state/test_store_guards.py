"""The Redis scripts' guards on a real redis-server: forged keys and values never fail a push
or a pull; each is dropped (or repaired) and named, and the rest goes through."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import orjson
import pytest
import redis.asyncio as aioredis

from gateway.state.base import START, CounterDelta, PushBatch, ReplicaSignal
from gateway.state.decisions import Decision
from gateway.state.redis_store import RedisStore
from tests.support.redis_server import TEST_TIMEOUT_S, RedisServer, new_namespace

Store = tuple[RedisStore, aioredis.Redis, str]


@pytest.fixture
async def store(shared_redis: RedisServer) -> AsyncIterator[Store]:
    namespace = new_namespace()
    impl = RedisStore(shared_redis.url, namespace=namespace, op_timeout_s=TEST_TIMEOUT_S)
    raw = aioredis.Redis.from_url(shared_redis.url, decode_responses=True)
    try:
        yield impl, raw, "{" + namespace + "}:"
    finally:
        await raw.aclose()
        await impl.close()


def batch(number: int, **counters: int) -> PushBatch:
    later = time.time() + 3600
    deltas = {k: CounterDelta(v, later) for k, v in counters.items()}
    decision = Decision("replica:r0", "drain", 0.0, "alice", "", time.time(), number, "gw-a")
    return PushBatch("gw-a#1", number, counters=deltas, decisions=(decision,))


async def test_a_corrupt_seq_and_a_non_integer_counter_do_not_fail_a_push_or_pull(
    store: Store,
) -> None:
    impl, raw, tag = store
    await impl.push(batch(1, k=2))
    await raw.set(tag + "seq", "not-a-number")
    await raw.hset(tag + "cnt", "k", "1.5")
    result = await impl.push(batch(2, k=3))
    assert result.applied
    snapshot = await impl.pull(START)
    assert snapshot.counters == {"k": 3}  # the forged total replaced by the delta
    assert int(await raw.get(tag + "seq") or 0) >= 1
    assert impl.rejects.counts[("redis", "seq")] == 1
    assert impl.rejects.counts[("redis", "counter")] == 1
    await raw.hset(tag + "cnt", "k", "x")  # read back before any push repairs it
    assert "k" not in (await impl.pull(START)).counters
    assert impl.rejects.counts[("redis", "counter")] == 2


@pytest.mark.parametrize("name", ["dec", "sig", "cnt", "hb", "chg", "gen"])
async def test_a_key_of_the_wrong_type_is_deleted_and_the_sync_goes_on(
    store: Store, name: str
) -> None:
    impl, raw, tag = store
    await impl.push(batch(1, k=1))
    await raw.delete(tag + name)
    await raw.rpush(tag + name, "forged")  # a list where the layout has another type
    assert (await impl.push(batch(2, k=1))).applied
    snapshot = await impl.pull(START)
    assert "replica:r0" in snapshot.decisions
    assert impl.rejects.counts[("redis", "key")] == 1


async def test_oversized_and_out_of_bounds_values_are_not_handed_back(store: Store) -> None:
    impl, raw, tag = store
    await impl.push(batch(1))
    huge = orjson.dumps(["replica:r1", "drain", 0.0, "m", "x" * 20_000_000, 1.0, 1, "gw-x"])
    await raw.hset(tag + "dec", "replica:r1", huge.decode())
    await raw.hset(tag + "dec", "replica:r2", '["replica:r2","drain",0.0,"m","",1.0,1e25,"x"]')
    forged = ReplicaSignal("r3", "open", 0.0, 1, "gw-x", time.time()).encode()
    await raw.hset(tag + "sig", "r3", forged.replace('"open"', '"molten"'))
    snapshot = await impl.pull(START)
    assert set(snapshot.decisions) == {"replica:r0"} and snapshot.signals == {}
    assert impl.rejects.snapshot() == {"redis/decision": 1, "redis/oversized": 1, "redis/signal": 1}
    # a push on a target whose stored decision is forged replaces it
    later = Decision("replica:r2", "drain", 0.0, "bob", "", time.time(), 2, "gw-a")
    await impl.push(PushBatch("gw-a#1", 2, decisions=(later,)))
    assert (await impl.pull(START)).decisions["replica:r2"] == later

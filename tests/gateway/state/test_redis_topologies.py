"""The Redis store on a real Redis Cluster and through a real Sentinel failover (loopback).

The contract and sync tests run on the cluster too (the ``store`` fixture); these add what is
particular to each: all of a namespace's keys in one slot, and a primary SIGKILLed under
Sentinel, after which the sync recovers on the promoted replica within a bounded time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import cast

import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster

from gateway.clock import FakeClock
from gateway.state.redis_store import RedisStore
from tests.gateway.state.instance import Instance
from tests.support.redis_cluster import RedisClusterServers, SentinelServers
from tests.support.redis_server import TEST_TIMEOUT_S, new_namespace

FAILOVER_BOUND_S = 30.0  # sentinel: 1 s to call the primary down, then an election and promotion


@pytest.fixture
def sentinel() -> Iterator[SentinelServers]:
    servers = SentinelServers(down_after_ms=1000)
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


async def test_a_namespace_lives_in_one_cluster_slot(
    shared_cluster: RedisClusterServers, clock: FakeClock
) -> None:
    ns = new_namespace()
    a = Instance(
        RedisStore(shared_cluster.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S), clock, "a"
    )
    b = Instance(
        RedisStore(shared_cluster.url, namespace=ns, op_timeout_s=TEST_TIMEOUT_S), clock, "b"
    )
    a.record(ok=3, failed=1)
    b.record(ok=2)
    a.ledger.local("r1", "open")
    for sync in (a.sync, b.sync, a.sync):
        assert await sync.tick()
    assert a.seen() == b.seen() == (6, 1)
    assert [s.breaker for s in b.applied] == ["open"]
    node = shared_cluster.nodes[0]
    client = RedisCluster(
        startup_nodes=[ClusterNode("127.0.0.1", node.port)], decode_responses=True
    )
    try:
        found = await client.keys(f"{{{ns}}}:*", target_nodes=RedisCluster.ALL_NODES)
        keys = cast(list[str], found)
        slots = {client.keyslot(key) for key in keys}
    finally:
        await client.aclose()
    assert {"gen", "seq", "chg", "exp", "sig", "cnt"} <= {k.split(":", 1)[1] for k in keys}
    assert len(slots) == 1
    for instance in (a, b):
        await instance.sync.stop()


async def test_a_sentinel_failover_is_a_bounded_gap_then_the_sync_recovers(
    sentinel: SentinelServers, clock: FakeClock
) -> None:
    a = Instance(RedisStore(sentinel.url, namespace="gw", op_timeout_s=0.5), clock, "a")
    b = Instance(RedisStore(sentinel.url, namespace="gw", op_timeout_s=0.5), clock, "b")
    a.record(ok=5)
    b.record(ok=3, failed=1)
    for sync in (a.sync, b.sync, a.sync):
        assert await sync.tick()
    assert a.sync.store.describe()["mode"] == "sentinel"
    old_primary = sentinel.primary_port()
    await asyncio.sleep(0.2)  # replication is asynchronous: let the replica catch up

    await asyncio.to_thread(sentinel.kill_primary)
    killed = time.monotonic()
    a.record(ok=2, failed=1)  # recorded while the store is away: kept, pushed on recovery
    first_failure = None
    while not await a.sync.tick():
        first_failure = first_failure or time.monotonic()
        assert time.monotonic() - killed < FAILOVER_BOUND_S, a.sync.last_error
        await asyncio.sleep(0.1)
    gap = time.monotonic() - killed
    assert first_failure is not None and a.sync.failures > 0  # it did notice the outage
    assert sentinel.primary_port() not in (None, old_primary)
    print(
        f"\nsentinel failover: sync back on the promoted replica {gap * 1000:.0f} ms after the "
        f"primary's SIGKILL ({a.sync.failures} failed ticks, down-after 1000 ms)"
    )
    assert await b.sync.tick() and await a.sync.tick()
    assert a.seen() == b.seen() == (12, 2)  # nothing lost: pending kept, or resynced
    for instance in (a, b):
        await instance.sync.stop()

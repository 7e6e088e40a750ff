"""The Redis store on a real Redis Cluster and through a real Sentinel failover (loopback).

The contract and sync tests run on the cluster too (the ``store`` fixture); these add what is
particular to each: all of a namespace's keys in one slot; a primary SIGKILLed under Sentinel,
after which the sync recovers on the promoted replica within a bounded time; and sentinels
with ``requirepass`` (their own password, not the data nodes'), which the store reaches with
the password the config names and which refuse it, visibly and masked, without.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterator
from typing import cast

import pytest
import redis
from redis.asyncio.cluster import ClusterNode, RedisCluster

from gateway.config.state import StateConfig
from gateway.state.redis_store import RedisStore
from gateway.state.redis_target import SENTINEL_AUTH_HINT
from gateway.state.sentinel_auth import SentinelAuth
from tests.gateway.state.instance import Instance
from tests.support.clock import FakeClock
from tests.support.redis_cluster import RedisClusterServers, SentinelServers
from tests.support.redis_server import TEST_TIMEOUT_S, new_namespace

FAILOVER_BOUND_S = 30.0  # sentinel: 1 s to call the primary down, then an election and promotion
DATA_PASSWORD = "data-Pa55-d4t4"  # the URL carries it (requirepass of the primary and replica)
SENTINEL_PASSWORD = "sentinel-Pa55-53n7"  # requirepass in sentinel.conf; the config names it


@pytest.fixture(params=["open", "guarded"])
def sentinel(request: pytest.FixtureRequest) -> Iterator[SentinelServers]:
    """One sentinel over a primary and replica: without passwords, or with theirs and its own."""
    guarded = request.param == "guarded"
    servers = SentinelServers(
        down_after_ms=1000,
        password=DATA_PASSWORD if guarded else None,
        sentinel_password=SENTINEL_PASSWORD if guarded else None,
    )
    servers.start()
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def guarded_sentinel() -> Iterator[SentinelServers]:
    """Two sentinels with ``requirepass``, over a primary and replica with another password."""
    servers = SentinelServers(
        sentinels=2, password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD
    )
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
    password = sentinel.sentinel_password
    auth = SentinelAuth(password) if password is not None else None
    a, b = (
        Instance(
            RedisStore(sentinel.url, namespace="gw", sentinel_auth=auth, op_timeout_s=0.5),
            clock,
            name,
        )
        for name in ("a", "b")
    )
    a.record(ok=5)
    b.record(ok=3, failed=1)
    for sync in (a.sync, b.sync, a.sync):  # a first tick may miss the 0.5 s op timeout on a
        started = time.monotonic()  # starved machine (Sentinel discovery, then the op): retry
        while not await sync.tick():
            assert time.monotonic() - started < 10, sync.last_error
            await asyncio.sleep(0.1)
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


async def test_sentinels_with_a_password_are_asked_with_the_one_the_config_names(
    guarded_sentinel: SentinelServers, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GW_TEST_SENTINEL_PASSWORD", SENTINEL_PASSWORD)
    state = StateConfig(
        backend="redis",
        redis_url=guarded_sentinel.url,
        sentinel_password_env="GW_TEST_SENTINEL_PASSWORD",
    )
    auth = state.sentinel_auth(os.environ)
    ns = new_namespace()
    a, b = (
        Instance(
            RedisStore(
                state.redis_url, namespace=ns, sentinel_auth=auth, op_timeout_s=TEST_TIMEOUT_S
            ),
            clock,
            name,
        )
        for name in ("a", "b")
    )
    a.record(ok=3, failed=1)
    b.record(ok=2)
    a.ledger.local("r1", "open")
    for sync in (a.sync, b.sync, a.sync):
        assert await sync.tick(), sync.last_error
    assert a.seen() == b.seen() == (6, 1)
    assert [s.breaker for s in b.applied] == ["open"]
    shown = str(a.sync.snapshot())
    assert not a.sync.degraded and "'sentinel_auth': {'username': None, 'password': '***'}" in shown
    assert SENTINEL_PASSWORD not in shown and DATA_PASSWORD not in shown
    for instance in (a, b):
        await instance.sync.stop()


@pytest.mark.parametrize("given", [None, "wrong-Pa55-w0ng"])
async def test_without_the_sentinels_password_the_store_is_degraded_with_a_masked_auth_error(
    guarded_sentinel: SentinelServers,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
    given: str | None,
) -> None:
    auth = SentinelAuth(given) if given is not None else None
    store = RedisStore(
        guarded_sentinel.url,
        namespace=new_namespace(),
        sentinel_auth=auth,
        op_timeout_s=TEST_TIMEOUT_S,
    )
    a = Instance(store, clock, "a")
    a.record(ok=1)
    with caplog.at_level(logging.WARNING):
        assert not await a.sync.tick()
    snapshot = a.sync.snapshot()
    assert snapshot["degraded"] and a.sync.failures == 1
    error = snapshot["last_error"]
    assert error.startswith(f"redis {store.url}: MasterNotFoundError: No master found for"), error
    # each sentinel's reason in a line of its own, not the client's repr (its pool, its
    # connection's settings: 2,000 characters a sentinel); redis-py's own AUTH message, kept,
    # is 170 characters from 8.2 on (the HELLO one), so the whole is bounded at twice that
    assert error.count("AuthenticationError") == 2 and "ConnectionPool" not in error, error
    assert len(error) < 800, error
    for sentinel in guarded_sentinel.sentinels:
        assert f"sentinel 127.0.0.1:{sentinel.port} - " in error
    assert error.endswith(f"({SENTINEL_AUTH_HINT})")
    assert "unavailable, serving on local state" in caplog.text
    shown = f"{snapshot} {caplog.text}"
    for secret in (DATA_PASSWORD, SENTINEL_PASSWORD, given or SENTINEL_PASSWORD):
        assert secret not in shown
    print(f"\nsentinels without their password ({given and 'a wrong one'}): {error}")
    await a.sync.stop()


def _sentinel_clients(servers: SentinelServers) -> list[int]:
    """How many clients each sentinel has connected, this question's own included."""
    counts = []
    for node in servers.sentinels:
        client = redis.Redis(port=node.port, password=servers.sentinel_password)
        try:
            counts.append(int(client.info("clients")["connected_clients"]))
        finally:
            client.close()
    return counts


async def test_a_closed_store_leaves_no_connection_open_on_any_sentinel(
    guarded_sentinel: SentinelServers,
) -> None:
    before = await asyncio.to_thread(_sentinel_clients, guarded_sentinel)
    auth = SentinelAuth(guarded_sentinel.sentinel_password or "")
    for _ in range(3):  # a reload builds a new store and closes the old one
        store = RedisStore(
            guarded_sentinel.url,
            namespace=new_namespace(),
            sentinel_auth=auth,
            op_timeout_s=TEST_TIMEOUT_S,
        )
        await store.pull()  # asks a sentinel for the primary, then reads from the primary
        await store.close()
    deadline = time.monotonic() + 5.0  # a sentinel counts a closed socket once it reads the EOF
    while (after := await asyncio.to_thread(_sentinel_clients, guarded_sentinel)) != before:
        assert time.monotonic() < deadline, f"sentinel clients {before} before, {after} after"
        await asyncio.sleep(0.05)

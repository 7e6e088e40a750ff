from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.state.base import StateStore
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore
from tests.support.clock import FakeClock
from tests.support.redis_cluster import RedisClusterServers
from tests.support.redis_server import TEST_TIMEOUT_S, RedisServer, new_namespace

# The contract tests never stall a server on purpose, so a call may take long on a starved
# machine (a Cluster's first calls most of all) without that being the failure under test.
CONTRACT_TIMEOUT_S = 5 * TEST_TIMEOUT_S


@pytest.fixture(scope="session")
def shared_redis() -> Iterator[RedisServer]:
    """One redis-server for the tests that do not kill it; each test uses its own prefix."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_cluster() -> Iterator[RedisClusterServers]:
    """One 3-node Redis Cluster on loopback for the contract and sync tests (own namespaces)."""
    cluster = RedisClusterServers()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, which it may kill, pause and restart."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock whose wall time is the real one (Redis expires keys by its own clock)."""
    return FakeClock(start=1000.0, wall_offset=time.time() - 1000.0)


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
async def store(request: pytest.FixtureRequest, clock: FakeClock) -> AsyncIterator[StateStore]:
    """Each contract test runs against every implementation: memory, one Redis, a Cluster."""
    if request.param == "memory":
        impl: StateStore = MemoryStore(clock)
    else:
        fixture = "shared_redis" if request.param == "redis" else "shared_cluster"
        server: RedisServer | RedisClusterServers = request.getfixturevalue(fixture)
        # The first test to ask for a server starts it, which takes seconds: the clock's wall
        # time must be the real one when the test begins, not when the clock was made.
        clock.set_wall(time.time())
        impl = RedisStore(server.url, namespace=new_namespace(), op_timeout_s=CONTRACT_TIMEOUT_S)
    try:
        yield impl
    finally:
        await impl.close()

"""A ``redis_url`` that names its password as ``${VAR}`` (as Kubernetes passes a Secret): a real
gateway reaches a real redis-server with ``requirepass`` through it, and the password is in
neither the config file nor ``/admin/state``."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.integration.conftest import StartReplicas
from tests.support.gateway import pool_config, start_gateway
from tests.support.processes import wait_until
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.integration
PASSWORD = "s3cret-Redis-pw-4-test"
VARIABLE = "GW_TEST_REDIS_PASSWORD"


@pytest.fixture
def guarded_redis() -> Iterator[RedisServer]:
    server = RedisServer(password=PASSWORD)
    server.start()
    yield server
    server.stop()


def test_the_gateway_reaches_a_redis_with_a_password_from_the_environment(
    start_replicas: StartReplicas, guarded_redis: RedisServer
) -> None:
    config = pool_config(start_replicas(1))
    url = f"redis://:${{{VARIABLE}}}@127.0.0.1:{guarded_redis.port}/0"
    config["state"] = {"backend": "redis", "redis_url": url, "sync_interval_s": 0.2}
    gateway = start_gateway(config, env={VARIABLE: PASSWORD})
    try:
        assert PASSWORD not in gateway.config_path.read_text()

        def store() -> dict[str, object]:
            state = httpx.get(f"{gateway.url}/admin/state", trust_env=False, timeout=5).json()
            return dict(state["state_store"])

        wait_until(
            lambda: store()["last_ok"] is not None and not store()["degraded"],
            10,
            message=lambda: f"a sync with Redis: {store()}",
        )
        shown = httpx.get(f"{gateway.url}/admin/state", trust_env=False, timeout=5).text
        assert PASSWORD not in shown
    finally:
        gateway.cleanup()

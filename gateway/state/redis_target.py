"""Where the shared state lives: one Redis, a Redis Cluster, or a primary found through Sentinel.

One URL says it all, so the one secret it may carry is masked by the one rule in
`gateway.redact` wherever it is shown:

- ``redis://[user:pw@]host:port[/db]`` (``rediss://`` for TLS): one Redis (or a proxy in front);
- ``redis+cluster://[user:pw@]host:port[,host:port...]``: a Redis Cluster, any of its nodes to
  start from (the client discovers the rest and follows the slots);
- ``redis+sentinel://[user:pw@]host:port[,host:port...]/<master name>[/db]``: the sentinels,
  which name the current primary; after a failover new connections go to the new one.

`gateway.state.redis_url.parse` checks a URL without connecting (the config validates with
it); `connect` builds the
asyncio client (redis-py's ``Redis``, ``RedisCluster`` or ``Sentinel.master_for``) and `close`
closes it, the sentinels' own connections included. The URL's
credentials are those of the data nodes. Sentinels have their own (``requirepass`` in
sentinel.conf, often another password): they are never in the URL but a `SentinelAuth` read
from the variable or file the config names (`gateway.state.sentinel_auth`); without one the
sentinels are asked without a password, and one with ``requirepass`` refuses (the store then
reports ``AuthenticationError`` in its ``last_error``).
"""

from __future__ import annotations

import re
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel

from gateway.state.redis_url import RedisTarget
from gateway.state.sentinel_auth import SentinelAuth

# How redis-py names each sentinel in a MasterNotFoundError: its client's repr, a line long.
_SENTINEL_REPR = re.compile(r"<redis\.[\w.]*Redis\(.*?host=([^,()]+),port=(\d+).*?\)>\)>\)>")
SENTINEL_AUTH_HINT = "a sentinel refused AUTH: its password is state.sentinel_password_env or _file"


def connect(
    target: RedisTarget, sentinel_auth: SentinelAuth | None = None, **options: Any
) -> aioredis.Redis | RedisCluster:
    """An asyncio client for ``target``; ``options``: socket timeouts, retry, decoding.
    ``sentinel_auth``: what the sentinels ask for (only a sentinel target takes one)."""
    if sentinel_auth is not None and target.mode != "sentinel":
        raise ValueError("sentinel credentials need a redis+sentinel:// URL")
    if target.mode == "single":
        return aioredis.Redis.from_url(target.url, **options)
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.tls:
        auth["ssl"] = True
    if target.mode == "cluster":
        options.pop("health_check_interval", None)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            **auth,
            **options,
        )
    # The sentinels get the data nodes' timeouts and retry too: redis-py's default retry backs
    # off for seconds on a ConnectionError, and a refused AUTH is one, so a sentinel that wants a
    # password would turn into a timeout instead of the AuthenticationError that says why.
    asking: dict[str, Any] = {
        k: v for k, v in options.items() if k.startswith("socket_") or k == "retry"
    }
    if sentinel_auth is not None:
        asking.update(sentinel_auth.kwargs())
    nodes = list(target.nodes)
    sentinel = Sentinel(nodes, sentinel_kwargs=asking)
    primary: aioredis.Redis = sentinel.master_for(
        target.master_name, db=target.db, **auth, **options
    )
    return primary


async def close(client: aioredis.Redis | RedisCluster) -> None:
    """Closes ``client``; for a sentinel target, the sentinels' clients too. redis-py's
    primary client closes only its own pool, and each sentinel it asked keeps a connection
    open: one socket per sentinel left behind by every reload and every store closed."""
    await client.aclose()
    # a RedisCluster has one per node
    pool = getattr(client, "connection_pool", None)
    manager = getattr(pool, "sentinel_manager", None)
    if isinstance(manager, Sentinel):
        await manager.aclose()


def redis_error_text(exc: BaseException) -> str:
    """``Type: message`` for an error of the client, short enough to read in ``/admin/state``:
    a sentinel is ``sentinel host:port``, and a sentinel's refused AUTH says what to set.
    The caller still scrubs it (a message may quote a secret)."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, MasterNotFoundError):
        text = _SENTINEL_REPR.sub(r"sentinel \1:\2", text)
        if "AuthenticationError" in text:
            text += f" ({SENTINEL_AUTH_HINT})"
    return text

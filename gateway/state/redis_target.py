"""Where the shared state lives: one Redis, a Redis Cluster, or a primary found through Sentinel.

One URL says it all, so the one secret it may carry is masked by the one rule in
`gateway.redact` wherever it is shown:

- ``redis://[user:pw@]host:port[/db]`` (``rediss://`` for TLS): one Redis (or a proxy in front);
- ``redis+cluster://[user:pw@]host:port[,host:port...]``: a Redis Cluster, any of its nodes to
  start from (the client discovers the rest and follows the slots);
- ``redis+sentinel://[user:pw@]host:port[,host:port...]/<master name>[/db]``: the sentinels,
  which name the current primary; after a failover new connections go to the new one.

`parse` checks a URL without connecting (the config validates with it); `connect` builds the
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
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel

from gateway.state.sentinel_auth import SentinelAuth

Mode = Literal["single", "cluster", "sentinel"]
_SCHEMES: dict[str, tuple[Mode, bool]] = {
    "redis": ("single", False),
    "rediss": ("single", True),
    "unix": ("single", False),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
}


# How redis-py names each sentinel in a MasterNotFoundError: its client's repr, a line long.
_SENTINEL_REPR = re.compile(r"<redis\.[\w.]*Redis\(.*?host=([^,()]+),port=(\d+).*?\)>\)>\)>")
SENTINEL_AUTH_HINT = "a sentinel refused AUTH: its password is state.sentinel_password_env or _file"


@dataclass(frozen=True, slots=True)
class RedisTarget:
    # may hold the password
    url: str = field(repr=False)
    mode: Mode
    tls: bool
    # cluster start nodes or sentinels
    nodes: tuple[tuple[str, int], ...] = ()
    master_name: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)


def parse(url: str) -> RedisTarget:
    """The target a state URL names; `ValueError` (without the URL's secret) if malformed."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        known = ", ".join(f"{s}://" for s in _SCHEMES)
        raise ValueError(f"a state redis_url starts with one of {known}")
    mode, tls = _SCHEMES[scheme.lower()]
    if mode == "single":
        return RedisTarget(url, mode, tls)
    parts = urlsplit(f"redis://{rest}")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    nodes = tuple(_node(item) for item in hosts.split(",") if item.strip())
    if not nodes:
        raise ValueError(f"a {scheme}:// URL lists at least one host:port")
    path = [p for p in parts.path.split("/") if p]
    master, db = "", 0
    if mode == "sentinel":
        if not path:
            raise ValueError("a redis+sentinel:// URL names the primary: .../<master name>[/db]")
        master, path = unquote(path[0]), path[1:]
    if len(path) > 1 or (path and not path[0].isdigit()):
        raise ValueError(f"a {scheme}:// URL ends with at most a database number")
    db = int(path[0]) if path else 0
    if mode == "cluster" and db != 0:
        raise ValueError("Redis Cluster has only database 0")
    username = unquote(user) if user and colon else None
    # "pw@": password
    secret = unquote(password) if colon else (unquote(user) if user else None)
    return RedisTarget(url, mode, tls, nodes, master, db, username, secret)


def _node(text: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("each node of a cluster or sentinel URL is host:port")
    return host.strip("[]"), int(port)


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
    sentinel = Sentinel(nodes, sentinel_kwargs=asking)  # type: ignore[no-untyped-call]
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

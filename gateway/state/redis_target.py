"""Where the shared state lives: one Redis, a Redis Cluster, or a primary found through Sentinel.

One URL says it all, so the one secret it may carry is masked by the one rule in
`gateway.redact` wherever it is shown:

- ``redis://[user:pw@]host:port[/db]`` (``rediss://`` for TLS): one Redis (or a proxy in front);
- ``redis+cluster://[user:pw@]host:port[,host:port...]``: a Redis Cluster, any of its nodes to
  start from (the client discovers the rest and follows the slots);
- ``redis+sentinel://[user:pw@]host:port[,host:port...]/<master name>[/db]``: the sentinels,
  which name the current primary; after a failover new connections go to the new one.

`parse` checks a URL without connecting (the config validates with it); `connect` builds the
asyncio client (redis-py's ``Redis``, ``RedisCluster`` or ``Sentinel.master_for``). The
credentials are those of the data nodes; sentinels are asked without a password.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel

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


@dataclass(frozen=True, slots=True)
class RedisTarget:
    url: str = field(repr=False)  # may hold the password
    mode: Mode
    tls: bool
    nodes: tuple[tuple[str, int], ...] = ()  # cluster start nodes or sentinels
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
    secret = unquote(password) if colon else (unquote(user) if user else None)  # "pw@": password
    return RedisTarget(url, mode, tls, nodes, master, db, username, secret)


def _node(text: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("each node of a cluster or sentinel URL is host:port")
    return host.strip("[]"), int(port)


def connect(target: RedisTarget, **options: Any) -> aioredis.Redis | RedisCluster:
    """An asyncio client for ``target``; ``options``: socket timeouts, retry, decoding."""
    if target.mode == "single":
        return aioredis.Redis.from_url(target.url, **options)
    auth: dict[str, Any] = {"username": target.username, "password": target.password}
    if target.tls:
        auth["ssl"] = True
    if target.mode == "cluster":
        options.pop("health_check_interval", None)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            **auth, **options,
        )  # fmt: skip
    sockets = {k: v for k, v in options.items() if k.startswith("socket_")}
    nodes = list(target.nodes)
    sentinel = Sentinel(nodes, sentinel_kwargs=sockets)  # type: ignore[no-untyped-call]
    primary: aioredis.Redis = sentinel.master_for(
        target.master_name, db=target.db, **auth, **options
    )
    return primary

"""A state URL read without connecting: one Redis, a Redis Cluster, or a primary found
through Sentinel (`gateway.state.redis_target` has the forms and builds the client).

Apart from the client so that what only checks a URL (the config's validation, in every
process) does not import redis-py: a data-plane worker never talks to Redis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

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

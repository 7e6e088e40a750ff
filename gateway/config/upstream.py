"""How the gateway talks to replicas: the ``upstream`` section (its connection pool and the caps
on what a replica may send back), and the keys older configs had for it under ``server:``."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import Field

from gateway.frozen import Frozen

log = logging.getLogger(__name__)

# A replica's reply: the same caps whether the transport is built from this config or alone.
DEFAULT_MAX_REPLY_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_REPLY_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_REPLY_HEADER_COUNT = 100

# server.<key> of older configs -> upstream.<key>: read, with a warning, for one release
MOVED_TO_UPSTREAM = {
    "max_connections_per_replica": "max_connections_per_replica",
    "max_reply_body_bytes": "max_reply_body_bytes",
    "max_reply_header_bytes": "max_reply_header_bytes",
    "max_reply_header_count": "max_reply_header_count",
    "max_reply_headers": "max_reply_header_count",
}


class UpstreamConfig(Frozen):
    """How the gateway talks to replicas: its connection pool and the caps on their replies.

    A replica is an untrusted peer: a reply over a ``max_reply_*`` cap is a failed attempt of
    that replica, charged to it like any other failure, and the connection is closed.
    """

    max_connections_per_replica: int = Field(
        256, gt=0, description="the connection pool's bound per replica (open connections at once)"
    )
    max_reply_body_bytes: int = Field(
        DEFAULT_MAX_REPLY_BODY_BYTES, gt=0, description="a replica's reply body; over: failed"
    )
    max_reply_header_bytes: int = Field(
        DEFAULT_MAX_REPLY_HEADER_BYTES,
        gt=0,
        description="a replica's reply status line + headers; over: failed",
    )
    max_reply_header_count: int = Field(
        DEFAULT_MAX_REPLY_HEADER_COUNT,
        gt=0,
        description="header lines in a replica's reply; over it: a failed attempt",
    )


def moved_to_upstream(data: dict[str, Any]) -> dict[str, Any]:
    """An older config's upstream limits under ``server:`` moved to ``upstream:``, each with a
    WARNING; one key set in both places (or under both its names) is an error."""
    server = data.get("server")
    if not isinstance(server, dict) or not MOVED_TO_UPSTREAM.keys() & server.keys():
        return data
    server, upstream = dict(server), dict(data.get("upstream") or {})
    given = {key: f"upstream.{key}" for key in upstream}
    for old in [k for k in server if k in MOVED_TO_UPSTREAM]:
        new = MOVED_TO_UPSTREAM[old]
        if new in given:
            raise ValueError(f"server.{old} and {given[new]} are one setting: keep upstream.{new}")
        log.warning("server.%s is deprecated: it is upstream.%s now", old, new)
        upstream[new], given[new] = server.pop(old), f"server.{old}"
    return {**data, "server": server, "upstream": upstream}

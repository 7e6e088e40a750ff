"""What one client may take from the server: bytes, time, requests in a row and connections.

Each limit keeps one big, slow or greedy client from hurting the others, and each is answered
the way HTTP says (`gateway.worker.http.protocol` applies them):

- a request head over ``max_header_bytes`` or with more than ``max_headers`` fields: 431;
- a head not complete ``header_timeout_s`` after the connection or the request's first byte,
  or a body not complete ``body_timeout_s`` after its head: 408, and the connection closes;
- once a body's first bytes have come, it must keep coming at ``min_body_rate`` bytes a second
  on average after a grace of ``body_rate_grace_s`` (Apache's ``mod_reqtimeout`` MinRate; nginx's
  timeout between two reads is the same idea): 408. Time the server itself stops reading (its
  handler is behind) does not count against the client;
- the body's bytes as they travel (chunk sizes, extensions and trailers included) over
  ``max_body_bytes``: 413, whatever the body declares;
- at most ``max_pipelined`` parsed requests wait on a connection; past that it is not read;
- an answer the client does not read for ``write_timeout_s``: the connection is dropped;
- ``max_connections`` open at once on a door, ``max_connections_per_peer`` of them from one
  address: past either, 503 and close.

After an error answer the connection lingers (reads and drops, up to ``linger_bytes`` for
``linger_s``) so that a client still sending reads the answer instead of a reset. When the answer
came before a body the client declared (a 413 for its length, a refusal of its head's values),
the rest of that body is read and dropped instead, up to ``linger_body_bytes`` within
``linger_body_s``, as nginx's lingering close does: a client that writes its whole body before
it reads (most do) then reads a 413, not a broken pipe.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClientLimits:
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    # bytes a second a body must average once it has begun (0: no minimum), after the grace
    min_body_rate: float = 500.0
    body_rate_grace_s: float = 5.0
    keep_alive_s: float = 5.0
    # the raw body (framing included); None: no cap here (the handler's own applies)
    max_body_bytes: int | None = None
    max_pipelined: int = 4
    write_timeout_s: float = 60.0
    linger_s: float = 1.0
    linger_bytes: int = 1024 * 1024
    linger_body_s: float = 10.0
    linger_body_bytes: int = 64 * 1024 * 1024
    http10: bool = True  # False: an HTTP/1.0 request gets 505
    max_connections: int | None = None  # None: no cap
    max_connections_per_peer: int | None = None

    def __post_init__(self) -> None:
        if self.max_pipelined < 1:
            raise ValueError("max_pipelined must be at least 1")
        if self.min_body_rate < 0:
            raise ValueError("min_body_rate must not be negative")

"""The caps on one upstream reply, and the size from which its body is read straight in.

A body of ``direct_body_min_bytes`` or more, framed by Content-Length, is read from the socket into
one buffer of its declared size (`asyncio.BufferedProtocol`: the loop reads into the buffer the
connection gives it): no bytes object per read, no copy by the parser, no join. Read the usual way,
a large reply came as many socket reads, heap blocks under the mmap threshold: freed out of order
among small objects, they left the heap fragmented, and RSS stayed far up after a burst
(docs/measured.md, The data path); one buffer of the reply's size is one mmap, given back whole
when it is freed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config.upstream import (
    DEFAULT_MAX_REPLY_BODY_BYTES,
    DEFAULT_MAX_REPLY_HEADER_BYTES,
    DEFAULT_MAX_REPLY_HEADER_COUNT,
)

__all__ = [
    "DEFAULT_LIMITS", "DIRECT_BODY_MIN_BYTES", "MAX_REPLY_BODY_BYTES", "MAX_REPLY_HEADER_BYTES",
    "MAX_REPLY_HEADER_COUNT", "ReplyLimits",
]  # fmt: skip

# The config's defaults (`server.max_reply_*`): a transport built alone caps as the gateway does.
MAX_REPLY_HEADER_COUNT = DEFAULT_MAX_REPLY_HEADER_COUNT
MAX_REPLY_HEADER_BYTES = DEFAULT_MAX_REPLY_HEADER_BYTES
MAX_REPLY_BODY_BYTES = DEFAULT_MAX_REPLY_BODY_BYTES
DIRECT_BODY_MIN_BYTES = 256 * 1024  # the allocator's mmap threshold (gateway.cli)


@dataclass(frozen=True, slots=True)
class ReplyLimits:
    """Caps on one reply, interim (1xx) replies and trailers included; over one, it fails.

    ``max_reply_header_bytes`` bounds the header fields' names and values, the bytes read before
    the final head is complete, and the non-body bytes of a body (chunk framing, trailers)
    beyond the body's own size.
    """

    max_reply_header_count: int = MAX_REPLY_HEADER_COUNT
    max_reply_header_bytes: int = MAX_REPLY_HEADER_BYTES
    max_reply_body_bytes: int = MAX_REPLY_BODY_BYTES
    direct_body_min_bytes: int = DIRECT_BODY_MIN_BYTES  # bodies read into one buffer


DEFAULT_LIMITS = ReplyLimits()

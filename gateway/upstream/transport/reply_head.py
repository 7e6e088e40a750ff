"""The rules for one upstream reply's head: how its body is framed, or why it is refused.

`Connection` (`gateway.upstream.transport.http1_connection`) runs httptools and keeps the
state of an exchange; what a parsed head means is decided here, once per head, from its status,
its fields and the caps (RFC 9112 6.3, strictly: a replica is an untrusted peer):

- an interim head (1xx) is skipped, unless it is 101 or below 100, closes the connection, or
  carries body framing (RFC 9110 forbids it, and llhttp would read a body after some 1xx);
- chunked is the only transfer coding; a Content-Length over the body cap is refused before a
  byte of the body is read, and a 2xx body of ``direct_body_min_bytes`` or more is read straight
  into one buffer (`gateway.upstream.transport.limits`);
- a 2xx with neither framing is refused (cut short, it could not be told from a whole one);
  another status with neither is read until the connection closes.

A refusal is raised as `HeadRefused` with the words the exchange fails with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.upstream.transport.limits import ReplyLimits

_BODYLESS_STATUSES = (204, 304)

# The field names replicas send on every reply, as they spell them: looked up instead of decoded
# and lower-cased on each (a small reply's head is mostly these). Name, its length.
KNOWN_NAMES: dict[bytes, tuple[str, int]] = {
    spelling: (name, len(name))
    for name in (
        "content-type",
        "content-length",
        "date",
        "server",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "inference-header-content-length",
        "x-request-id",
    )
    for spelling in (name.encode(), name.title().encode(), name.upper().encode())
}


class HeadRefused(Exception):
    """The head breaks a rule or a cap; ``str()`` says which."""


@dataclass(frozen=True, slots=True)
class Framing:
    """How the body after a head is read."""

    # a 1xx head: no body, the final head follows
    interim: bool = False
    # no framing, not a 2xx: the body ends when the connection does
    until_eof: bool = False
    # the Content-Length of a body read straight into one buffer (0: not)
    direct_size: int = 0


INTERIM = Framing(interim=True)
# by Content-Length below the direct size, by chunks, or no body at all
FRAMED = Framing()
UNTIL_EOF = Framing(until_eof=True)


def framing(
    status: int,
    headers: Mapping[str, str],
    limits: ReplyLimits,
    *,
    keep_alive: bool,
    head_request: bool,
) -> Framing:
    """The framing of the body after this head (``keep_alive``: the parser's verdict on the
    connection; ``head_request``: the request was a HEAD, so the reply has no body)."""
    if status < 200:
        _check_interim(status, headers, keep_alive)
        return INTERIM
    bodyless = head_request or status in _BODYLESS_STATUSES
    coding = headers.get("transfer-encoding")
    # llhttp refused repeats and TE alongside it
    length = headers.get("content-length")
    if coding is not None:
        if coding.lower() != "chunked":
            raise HeadRefused(f"unsupported Transfer-Encoding {coding!r}")
        return FRAMED
    if length is not None:
        if bodyless:
            return FRAMED
        size = int(length)
        if size > limits.max_reply_body_bytes:
            raise HeadRefused(cap_message(limits, "reply body", "max_reply_body_bytes"))
        if size >= limits.direct_body_min_bytes and 200 <= status < 300:
            # read straight in once this read is parsed
            return Framing(direct_size=size)
        return FRAMED
    if bodyless:
        return FRAMED
    if 200 <= status < 300:
        raise HeadRefused("a 2xx reply with neither Content-Length nor chunked encoding")
    return UNTIL_EOF


def _check_interim(status: int, headers: Mapping[str, str], keep_alive: bool) -> None:
    if status == 101 or status < 100:
        raise HeadRefused(f"unexpected status {status}")
    if not keep_alive:
        raise HeadRefused("an interim reply that closes the connection")
    if "content-length" in headers or "transfer-encoding" in headers:
        raise HeadRefused(f"an interim reply ({status}) with body framing headers")


def size_refusal(
    limits: ReplyLimits, field_bytes: int, received: int, body_size: int, final: bool
) -> str | None:
    """Why a reply's header fields, or its bytes that are not body, are too many (None: not).

    Checked after each read once the reply outgrows the header cap, so no field grows past the
    cap by more than one read in httptools' buffers. Bytes that are not body (heads, chunk
    framing, trailers: ``received`` less ``body_size``) may exceed the body's own size by the
    header cap; ``final``: the final head is parsed, so what follows it is not head.
    """
    cap = limits.max_reply_header_bytes
    if field_bytes > cap:
        return cap_message(limits, "reply header fields", "max_reply_header_bytes")
    if received - body_size > cap + body_size:
        where = "chunk framing and trailers" if final else "head"
        return cap_message(limits, f"reply {where}", "max_reply_header_bytes")
    return None


def cap_message(limits: ReplyLimits, what: str, cap: str) -> str:
    """A cap's refusal in words, naming the setting and its value."""
    return f"{what} over {cap}={getattr(limits, cap)}"

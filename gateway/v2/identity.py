"""Every request that leaves for a replica carries a V2 ``id``: the client's, or the gateway's.

The reply must echo it (`gateway.v2.reply.check_reply`), so an answer meant for another
request, however the byte stream got out of step, is caught before a client sees it. The id is
spliced into the JSON header rather than re-encoding the body; binary tensor bytes stay put.
The id is the caller's ``x-request-id`` when that is a sane token (at most 128 visible ASCII
characters), else one the gateway makes (`request_id_of`), so answers and log lines match.
"""

from __future__ import annotations

import itertools
import os
import re

import msgspec
import orjson

from gateway.v2.body import SMALL_BODY_BYTES, Body
from gateway.v2.reply import raw_members
from gateway.v2.request import InferRequestInfo, detached, parse_infer_request

_SANE = re.compile(r"[\x21-\x7e]{1,128}")
_ids = itertools.count(1)
_prefix = f"{os.getpid():x}-"


class GatewayId(str):
    """An id this gateway made (`request_id_of`): no other request has it. A type, not a
    pattern, so no client can pass its own id off as one."""

    __slots__ = ()


def request_id_of(given: str | None) -> str:
    """The caller's request id when it is a sane token, else a new one."""
    if given is not None and _SANE.fullmatch(given):
        return given
    return GatewayId(f"{_prefix}{next(_ids)}")


def upstream_id(client_id: str) -> str:
    """The id a request carries to replicas: one no other request of this gateway has, so a
    late answer to another client's request with the same id ("1") is caught
    (`gateway.v2.reply.check_reply`) rather than delivered: the client's plus a suffix,
    or the gateway's own id as it is."""
    if type(client_id) is GatewayId:
        return client_id
    return f"{client_id}~{_prefix}{next(_ids)}"


def with_request_id(
    body: Body, header_length: str | None, info: InferRequestInfo, request_id: str
) -> tuple[Body, str | None, InferRequestInfo]:
    """The body (and header length, info) carrying the id ``request_id`` in its JSON header,
    in place of the client's if it has one: a small buffer between views of the received
    bytes, so the tensor data is neither copied nor moved."""
    encoded = orjson.dumps(request_id)
    end = body.size if header_length is None else int(header_length)
    if "id" not in info.header:
        # a validated request is a JSON object with inputs
        start = _opening(body)
        new = _spliced(body, start, b'"id":' + encoded + b",", 0)
    else:
        at = _id_value(body, end, info.header["id"])
        if at is not None:
            new = _spliced(body, at[0], encoded, at[1] - at[0])
        else:
            # the id amid the header: re-encoded (small unless a large JSON body)
            full = parse_infer_request(body, header_length) if detached(info.header) else info
            head = orjson.dumps({**full.header, "id": request_id})
            new = Body([head, *body.views(end)])
    length = None if header_length is None else str(end + new.size - body.size)
    header = {**info.header, "id": request_id}
    return new, length, InferRequestInfo(request_id, header, info.binary_length)


def with_client_id(
    body: bytes, header_length: str | None, sent_id: str, client_id: str
) -> tuple[bytes, str | None]:
    """A reply carrying the ``client_id`` in place of the ``sent_id`` the gateway sent upstream
    (the client gets its own id back); unchanged if it does not carry ``sent_id``."""
    if sent_id == client_id:
        return body, header_length
    end = len(body) if header_length is None else int(header_length)
    sent = orjson.dumps(sent_id)
    for member in (b'"id":' + sent, b'"id": ' + sent):
        at = body.find(member, 0, end)
        if at >= 0:
            value = at + len(member) - len(sent)
            new = body[:value] + orjson.dumps(client_id) + body[value + len(sent) :]
            grown = len(new) - len(body)
            return new, None if header_length is None else str(end + grown)
    header = raw_members(memoryview(body)[:end])
    said = header.get("id") if header is not None else None
    if header is None or said is None or _decoded(said) != sent_id:
        return body, header_length
    header["id"] = msgspec.Raw(orjson.dumps(client_id))
    head = msgspec.json.encode(header)
    if header_length is None:
        return head, None
    return head + body[end:], str(len(head))


def _decoded(value: msgspec.Raw) -> object:
    """A raw JSON member's value (None for one orjson will not read: nested too deep)."""
    try:
        return orjson.loads(memoryview(value))
    except orjson.JSONDecodeError:
        return None


_STRING = rb'("(?:[^"\\]|\\.)*")'
# The top-level "id" member when it opens the object, or closes it (after a comma; a quote
# after a comma outside a string opens a key, and the last ``}`` closes the top level).
_FIRST_ID = re.compile(rb'\s*\{\s*"id"\s*:\s*' + _STRING)
_LAST_ID = re.compile(rb',\s*"id"\s*:\s*' + _STRING + rb"\s*\}\s*$")
# bytes read at either end of the JSON header for it
_FIRST_ID_SCAN = 4096


def _id_value(body: Body, end: int, value: str) -> tuple[int, int] | None:
    """Where the top-level ``id`` member's value (``value``) lies in the JSON header ending at
    ``end``, when it is the first or the last member; else None."""
    first = _FIRST_ID.match(body.head(min(end, _FIRST_ID_SCAN)))
    if first is not None and orjson.loads(first[1]) == value:
        return first.start(1), first.end(1)
    tail_at = max(0, end - _FIRST_ID_SCAN)
    last = _LAST_ID.search(b"".join(body.views(tail_at, end)))
    if last is not None and orjson.loads(last[1]) == value:
        return tail_at + last.start(1), tail_at + last.end(1)
    return None


def _spliced(body: Body, at: int, insert: bytes, cut: int) -> Body:
    """`Body.spliced`, or for a small body one new buffer (a copy of a few hundred bytes
    costs less than views, and the transport writes it whole anyway)."""
    if body.size >= SMALL_BODY_BYTES:
        return body.spliced(at, insert, cut)
    data = body.joined()
    return Body.of(data[:at] + insert + data[at + cut :])


def _opening(body: Body) -> int:
    """Where the JSON object's opening brace ends (the first ``{``; only whitespace precedes
    it in a validated request)."""
    first = body.pieces[0] if body.pieces else b""
    if type(first) is bytes and (at := first.find(b"{", 0, _FIRST_ID_SCAN)) >= 0:
        return at + 1
    offset = 0
    for piece in body.pieces:
        for at in range(0, len(piece), _FIRST_ID_SCAN):
            found = bytes(piece[at : at + _FIRST_ID_SCAN]).find(b"{")
            if found >= 0:
                return offset + at + found + 1
        offset += len(piece)
    raise ValueError("no JSON object in the body")

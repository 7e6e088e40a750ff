"""One input, named: a digest of a request's body without its ``id``, for the fault judge.

Two requests carry "the same input" when their bodies are the same bytes once the ``id``
member is cut out: the JSON header (each tensor's name, datatype, shape, parameters and data,
and the outputs asked for) and the binary tensor bytes after it. Every request has an id of
its own (the client's, or the one the gateway splices in), so without the cut no two requests
would ever match. Raw bytes are hashed, never parsed, so the cost is a hash of the body
(SHA-1), paid only for an error answer the judge can use it for.
"""

from __future__ import annotations

import hashlib

import orjson

from gateway.v2.body import Body

# larger bodies are hashed off the event loop (hashlib frees the GIL)
OFF_LOOP_BYTES = 64 * 1024


def input_digest(body: bytes | Body, header_length: str | None, request_id: str | None) -> str:
    """A hex digest of ``body`` without the ``id`` member holding ``request_id``; a `Body` is
    hashed piece by piece, not joined (only a binary request's JSON header is copied)."""
    if isinstance(body, Body):
        header_end = _header_end(header_length, len(body))
        single = body.pieces[0] if len(body.pieces) == 1 else None
        header = bytes(single) if single is not None else body.head(header_end)
        start, end = _id_member(header, header_end, request_id)
        digest = hashlib.sha1(usedforsecurity=False)
        for piece in (*body.views(0, start), *body.views(end)):
            digest.update(piece)
        return digest.hexdigest()
    start, end = _id_member(body, _header_end(header_length, len(body)), request_id)
    view = memoryview(body)
    digest = hashlib.sha1(view[:start], usedforsecurity=False)
    digest.update(view[end:])
    return digest.hexdigest()


def _id_member(body: bytes, header_end: int, request_id: str | None) -> tuple[int, int]:
    """Where the ``"id": "<request_id>"`` member lies in the JSON header ((0, 0): nowhere)."""
    if request_id is None:
        return 0, 0
    value = orjson.dumps(request_id)
    for member in (b'"id":' + value, b'"id": ' + value):
        start = body.find(member, 0, header_end)
        if start >= 0:
            return start, start + len(member)
    return 0, 0


def _header_end(header_length: str | None, size: int) -> int:
    """Where the JSON header ends (the whole body without the binary extension)."""
    try:
        length = int(header_length) if header_length is not None else size
    except ValueError:
        return size
    return length if 0 < length <= size else size

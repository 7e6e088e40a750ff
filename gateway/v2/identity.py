"""Every request that leaves for a replica carries a V2 ``id``: the client's, or the gateway's.

The reply must echo it (`gateway.v2.response.check_reply`), so an answer meant for another
request, however the byte stream got out of step, is caught before a client sees it. The id is
spliced into the JSON header rather than re-encoding the body; binary tensor bytes stay put.
The id is the caller's ``x-request-id`` when that is a sane token (at most 128 visible ASCII
characters), else one the gateway makes (`request_id_of`), so answers and log lines match.
"""

from __future__ import annotations

import itertools
import os
import re

import orjson

from gateway.v2.request import InferRequestInfo

_SANE = re.compile(r"[\x21-\x7e]{1,128}")
_ids = itertools.count(1)
_prefix = f"{os.getpid():x}-"


def request_id_of(given: str | None) -> str:
    """The caller's request id when it is a sane token, else a new one."""
    if given is not None and _SANE.fullmatch(given):
        return given
    return f"{_prefix}{next(_ids)}"


def with_request_id(
    body: bytes, header_length: str | None, info: InferRequestInfo, request_id: str
) -> tuple[bytes, str | None, InferRequestInfo]:
    """The body (and header length, info) carrying ``request_id`` unless it has an id already."""
    if "id" in info.header:
        return body, header_length, info
    start = body.index(b"{") + 1  # a validated request is a JSON object with inputs
    insert = b'"id":' + orjson.dumps(request_id) + b","
    new_body = body[:start] + insert + body[start:]
    new_length = None if header_length is None else str(int(header_length) + len(insert))
    header = {"id": request_id, **info.header}
    return new_body, new_length, InferRequestInfo(request_id, header, info.binary_length)

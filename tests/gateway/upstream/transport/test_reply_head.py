"""The head rules on their own: every framing a reply head can get, and every refusal."""

from __future__ import annotations

import pytest

from gateway.upstream.transport.limits import ReplyLimits
from gateway.upstream.transport.reply_head import (
    FRAMED,
    INTERIM,
    UNTIL_EOF,
    Framing,
    HeadRefused,
    framing,
)

LIMITS = ReplyLimits(100, 8192, 10_000, direct_body_min_bytes=1_000)


def _framing(status: int, head: bool = False, keep_alive: bool = True, **fields: str) -> Framing:
    headers = {name.replace("_", "-"): value for name, value in fields.items()}
    return framing(status, headers, LIMITS, keep_alive=keep_alive, head_request=head)


@pytest.mark.parametrize(
    ("status", "fields", "head", "expected"),
    [
        (100, {}, False, INTERIM),
        (103, {"link": "</a>"}, False, INTERIM),
        (200, {"content_length": "10"}, False, FRAMED),
        (200, {"content_length": "999"}, False, FRAMED),
        (200, {"content_length": "1000"}, False, Framing(direct_size=1_000)),
        (404, {"content_length": "5000"}, False, FRAMED),  # only a 2xx body is read straight in
        (200, {"transfer_encoding": "Chunked"}, False, FRAMED),
        (204, {}, False, FRAMED),
        (304, {}, False, FRAMED),
        (200, {}, True, FRAMED),  # the reply to HEAD has no body, whatever it declares
        (200, {"content_length": "50000"}, True, FRAMED),
        (500, {}, False, UNTIL_EOF),
    ],
)
def test_how_each_head_frames_its_body(
    status: int, fields: dict[str, str], head: bool, expected: Framing
) -> None:
    assert _framing(status, head, True, **fields) == expected


@pytest.mark.parametrize(
    ("status", "fields", "keep_alive", "reason"),
    [
        (101, {}, True, "unexpected status 101"),
        (99, {}, True, "unexpected status 99"),
        (100, {}, False, "an interim reply that closes the connection"),
        (100, {"content_length": "0"}, True, "an interim reply (100) with body framing headers"),
        (200, {"transfer_encoding": "gzip"}, True, "unsupported Transfer-Encoding 'gzip'"),
        (200, {"content_length": "10001"}, True, "reply body over max_reply_body_bytes=10000"),
        (200, {}, True, "a 2xx reply with neither Content-Length nor chunked encoding"),
    ],
)
def test_each_refusal_says_why(
    status: int, fields: dict[str, str], keep_alive: bool, reason: str
) -> None:
    with pytest.raises(HeadRefused) as refused:
        _framing(status, False, keep_alive, **fields)
    assert str(refused.value) == reason

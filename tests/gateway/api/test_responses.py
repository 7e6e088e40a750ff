"""The raw ASGI answer helpers: header lines the gateway built, sent as ASGI messages."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.api.responses import checked, send_lines

LINES = b"content-type: application/json\r\nx-served-by: r0\r\nx-attempts: 1\r\n"
HEADERS = [(b"content-type", b"application/json"), (b"x-served-by", b"r0"), (b"x-attempts", b"1")]


async def test_lines_leave_as_one_start_message_with_the_length_then_the_body() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await send_lines(send, {}, 200, LINES, b"hello")
    assert sent[0]["status"] == 200
    assert sent[0]["headers"] == [*HEADERS, (b"content-length", b"5")]
    assert sent[1]["body"] == b"hello"


def test_a_value_from_a_replica_with_a_control_byte_is_refused() -> None:
    assert checked(b"application/json; charset=utf-8\t") == b"application/json; charset=utf-8\t"
    with pytest.raises(ValueError, match="invalid header value"):
        checked(b"text/plain\r\nx-evil: 1")

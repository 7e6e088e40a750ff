"""The gateway's own answers: the same bytes uvicorn's ``send`` writes, in one call, past its
per-header validation; uvicorn's ``send`` where the fast path must not run."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.api.responses import checked, send_lines
from gateway.server.body_cycle import PiecesCycle

LINES = b"content-type: application/json\r\nx-served-by: r0\r\nx-attempts: 1\r\n"
HEADERS = [(b"content-type", b"application/json"), (b"x-served-by", b"r0"), (b"x-attempts", b"1")]
DATE = [(b"date", b"Tue, 01 Dec 2026 23:00:00 GMT")]


class Flow:
    write_paused = False

    def resume_reading(self) -> None:
        pass


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True


def cycle(
    keep_alive: bool = True, access_log: bool = False
) -> tuple[PiecesCycle, Transport, list[int]]:
    transport, answered = Transport(), []
    scope: Any = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "query_string": b"",
        "http_version": "1.1",
        "client": None,
    }
    raw = RequestResponseCycle(
        scope=scope,
        transport=transport,  # type: ignore[arg-type]
        flow=Flow(),  # type: ignore[arg-type]
        logger=logging.getLogger("t"),
        access_logger=logging.getLogger("t"),
        access_log=access_log,
        default_headers=DATE,
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: answered.append(1),
    )
    return PiecesCycle.adopt(raw), transport, answered


async def uvicorns(keep_alive: bool) -> bytes:
    fast, transport, _ = cycle(keep_alive)
    headers = [*HEADERS, (b"content-length", b"5")]
    await fast.send({"type": "http.response.start", "status": 200, "headers": headers})
    await fast.send({"type": "http.response.body", "body": b"hello"})
    return b"".join(transport.written)


@pytest.mark.parametrize("keep_alive", [True, False])
async def test_an_answer_is_the_bytes_uvicorn_writes_and_ends_the_cycle_as_it_does(
    keep_alive: bool,
) -> None:
    fast, transport, answered = cycle(keep_alive)
    assert fast.answer(200, LINES, b"hello")
    assert b"".join(transport.written) == await uvicorns(keep_alive)
    assert fast.response_complete and answered == [1] and transport.closed is not keep_alive
    assert not fast.answer(200, LINES, b"again")  # once per cycle


async def test_with_an_access_log_or_without_the_protocol_asgi_messages_carry_it() -> None:
    logged, transport, _ = cycle(access_log=True)
    scope: Any = {"gateway.answer": logged.answer}
    await send_lines(logged.send, scope, 200, LINES, b"hello")  # type: ignore[arg-type]
    assert b"".join(transport.written) == await uvicorns(True)
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    await send_lines(send, {}, 200, LINES, b"hello")
    assert sent[0]["headers"] == [*HEADERS, (b"content-length", b"5")]


def test_a_value_from_a_replica_with_a_control_byte_is_refused() -> None:
    assert checked(b"application/json; charset=utf-8\t") == b"application/json; charset=utf-8\t"
    with pytest.raises(ValueError, match="invalid header value"):
        checked(b"text/plain\r\nx-evil: 1")

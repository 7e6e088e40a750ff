"""Every answer carries x-request-id and, with tracing on, traceparent."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from gateway.api.ids import AnswerIds
from gateway.telemetry.tracecontext import parse_traceparent
from gateway.v2.identity import request_id_of

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def _answer(app: AnswerIds, headers: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/v2/health/live", "headers": headers}
    await app(scope, receive, send)
    return dict(sent[0]["headers"])


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    headers = [(b"content-type", b"application/json"), (b"x-request-id", b"stale")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"{}"})


async def test_the_callers_request_id_and_trace_come_back() -> None:
    got = await _answer(
        AnswerIds(_inner, tracing=True),
        [(b"x-request-id", b"abc-1"), (b"traceparent", PARENT.encode())],
    )
    assert got[b"x-request-id"] == b"abc-1"  # the app's own stale value replaced, not doubled
    parent = parse_traceparent(got[b"traceparent"].decode())
    assert parent is not None and parent.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert parent.span_id != "b7ad6b7169203331" and parent.sampled  # a child of the caller's


async def test_new_ids_when_the_caller_has_none_or_an_insane_one() -> None:
    got = await _answer(AnswerIds(_inner, tracing=True), [(b"x-request-id", b"x" * 500)])
    assert got[b"x-request-id"] != b"x" * 500 and len(got[b"x-request-id"]) < 40
    parent = parse_traceparent(got[b"traceparent"].decode())
    assert parent is not None and not parent.sampled  # a new trace, unsampled: no span kept
    quiet = await _answer(AnswerIds(_inner, tracing=False), [])
    assert b"traceparent" not in quiet and b"x-request-id" in quiet


def test_request_ids_are_sane_tokens() -> None:
    assert request_id_of("req-42") == "req-42"
    assert request_id_of("has space") != "has space"
    assert request_id_of(None) != request_id_of(None)  # each new one differs

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from gateway.telemetry.logging import bind_request, configure_logging, unbind_request
from gateway.telemetry.tracing import Tracer


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(json=True, level="DEBUG", stream=out)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    parsed = [json.loads(line) for line in stream.getvalue().splitlines()]
    return [line for line in parsed if line["logger"] == "gateway.test"]


def test_each_line_is_one_json_object_with_the_basic_fields(stream: io.StringIO) -> None:
    logging.getLogger("gateway.test").info("hello %s", "world", extra={"replica": "r1"})
    [line] = lines(stream)
    assert line["msg"] == "hello world"
    assert line["level"] == "INFO"
    assert line["logger"] == "gateway.test"
    assert line["replica"] == "r1"
    assert isinstance(line["ts"], str) and line["ts"].endswith("Z") and "T" in line["ts"]
    assert "request_id" not in line and "trace_id" not in line


def test_lines_carry_the_request_and_trace_id_of_the_request_being_served(
    stream: io.StringIO,
) -> None:
    span = Tracer().start_request({}, "digits")
    token = bind_request("req-7", span)
    logging.getLogger("gateway.test").warning("slow replica")
    unbind_request(token)
    logging.getLogger("gateway.test").warning("after")
    first, second = lines(stream)
    assert first["request_id"] == "req-7" and first["trace_id"] == span.trace_id
    assert "request_id" not in second


async def test_concurrent_requests_do_not_mix_their_ids(stream: io.StringIO) -> None:
    async def serve(request_id: str) -> None:
        bind_request(request_id)
        await asyncio.sleep(0)
        logging.getLogger("gateway.test").info("done %s", request_id)

    await asyncio.gather(*(asyncio.create_task(serve(f"req-{i}")) for i in range(5)))
    assert all(line["msg"] == f"done {line['request_id']}" for line in lines(stream))


def test_exceptions_and_odd_values_are_serialised(stream: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("gateway.test").exception("failed", extra={"obj": object()})
    [line] = lines(stream)
    assert "ValueError: boom" in str(line["exc"])
    assert str(line["obj"]).startswith("<object object")


def test_configuring_again_replaces_the_handler_and_text_mode_is_plain() -> None:
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    configure_logging(json=True, stream=io.StringIO())
    handler = configure_logging(json=False, level=logging.INFO, stream=out)
    try:
        assert sum(getattr(h, "_gateway_handler", False) for h in root.handlers) == 1
        token = bind_request("req-1")
        logging.getLogger("gateway.test").info("plain")
        unbind_request(token)
        assert out.getvalue().rstrip().endswith("gateway.test: plain [request req-1]")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)

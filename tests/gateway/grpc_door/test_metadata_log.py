"""grpc's error line for non-UTF-8 metadata: one warning per interval, no traceback, no value."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest

from gateway.grpc_door.metadata_log import (
    CYGRPC_LOGGER,
    NonUtf8Metadata,
    quiet_non_utf8_metadata,
)
from tests.support.clock import FakeClock


def grpc_line(value: bytes) -> logging.LogRecord:
    """The record grpc writes for a value it cannot decode (an error, with its traceback)."""
    try:
        value.decode("utf8")
    except UnicodeDecodeError:
        exc_info = sys.exc_info()
    message = "Invalid encoding on %s"
    return logging.LogRecord(CYGRPC_LOGGER, logging.ERROR, "x", 1, message, (value,), exc_info)


@pytest.fixture
def clean_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger(CYGRPC_LOGGER)
    before = list(logger.filters)
    yield logger
    logger.filters[:] = before


def test_one_warning_per_interval_without_the_traceback_or_the_value() -> None:
    clock = FakeClock()
    lines = NonUtf8Metadata(clock, interval_s=10.0)
    first = grpc_line(b"\xe9\r\n")
    assert lines.filter(first)
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert "\\xe9" not in first.getMessage() and "held back" in first.getMessage()
    assert not any(lines.filter(grpc_line(b"\xff")) for _ in range(500))
    clock.advance(10.0)
    later = grpc_line(b"\xff")
    assert lines.filter(later)
    assert "500 such lines held back" in later.getMessage()


def test_grpcs_other_lines_pass_untouched() -> None:
    lines = NonUtf8Metadata(FakeClock())
    record = logging.LogRecord(CYGRPC_LOGGER, logging.ERROR, "x", 1, "other %s", ("x",), None)
    assert lines.filter(record)
    assert record.levelno == logging.ERROR and record.getMessage() == "other x"


def test_installed_once_on_grpcs_logger(clean_logger: logging.Logger) -> None:
    first = quiet_non_utf8_metadata(FakeClock())
    assert quiet_non_utf8_metadata(FakeClock()) is first
    assert [f for f in clean_logger.filters if isinstance(f, NonUtf8Metadata)] == [first]

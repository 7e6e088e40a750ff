from __future__ import annotations

import pytest

from gateway.deadline import Deadline, timeout_from_header
from gateway.errors import BadRequest
from tests.support.clock import FakeClock


def test_deadline_counts_down_with_the_clock() -> None:
    clock = FakeClock()
    deadline = Deadline.after(clock, 0.5)
    assert deadline.remaining() == pytest.approx(0.5)
    clock.advance(0.2)
    assert deadline.remaining() == pytest.approx(0.3)
    assert deadline.elapsed() == pytest.approx(0.2)
    clock.advance(0.3)
    assert deadline.expired()


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, 1.0), ("", 1.0), ("250", 0.25), ("999999", 60.0), ("1.5", 0.0015)]
)
def test_timeout_from_header(raw: str | None, expected: float) -> None:
    assert timeout_from_header(raw, 1000, 60_000) == pytest.approx(expected)


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "nan"])
def test_bad_timeout_header_names_the_header(raw: str) -> None:
    with pytest.raises(BadRequest, match="x-request-timeout-ms"):
        timeout_from_header(raw, 1000, 60_000)

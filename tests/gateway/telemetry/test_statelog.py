from __future__ import annotations

import logging

import pytest

from gateway.clock import FakeClock
from gateway.telemetry.statelog import StateLog

LOGGER = "gateway.test.statelog"


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_state_is_logged_when_it_changes_and_never_repeated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = StateLog(logging.getLogger(LOGGER), FakeClock())
    with caplog.at_level(logging.INFO, LOGGER):
        assert log.change("fallback", "digits", "on", reason="no_replica")
        for _ in range(100):  # every request on the degraded path says so again
            assert not log.change("fallback", "digits", "on")
        assert log.change("fallback", "digits", "off", "fallback for digits off")
        assert log.change("breaker", "r1", "open")  # other subjects are independent
    assert messages(caplog) == [
        "fallback digits: on",
        "fallback for digits off",
        "breaker r1: open",
    ]
    first, second, _ = (r for r in caplog.records if r.name == LOGGER)
    assert first.__dict__["event"] == "fallback" and first.__dict__["subject"] == "digits"
    assert first.__dict__["reason"] == "no_replica" and "previous" not in first.__dict__
    assert second.__dict__["previous"] == "on" and second.__dict__["state"] == "off"
    assert log.state("fallback", "digits") == "off"


def test_flapping_is_summarised_and_flush_logs_the_settled_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    log = StateLog(logging.getLogger(LOGGER), clock, min_interval_s=10.0)
    with caplog.at_level(logging.INFO, LOGGER):
        assert log.change("breaker", "r1", "open")
        for state in ("half-open", "open", "half-open", "closed"):
            clock.advance(1)
            assert not log.change("breaker", "r1", state)
        assert log.flush() == 1
        assert log.flush() == 0
        clock.advance(11)
        assert log.change("breaker", "r1", "open")
    assert messages(caplog) == [
        "breaker r1: open",
        "breaker r1: closed (4 changes in between not logged)",
        "breaker r1: open",
    ]


def test_reserved_record_names_in_fields_do_not_break_logging(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = StateLog(logging.getLogger(LOGGER))
    with caplog.at_level(logging.INFO, LOGGER):
        log.change("alert", "availability", "firing", name="fast-burn", msg_count=1)
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.__dict__["field_name"] == "fast-burn"


def test_once_logs_a_key_only_the_first_time(caplog: pytest.LogCaptureFixture) -> None:
    log = StateLog(logging.getLogger(LOGGER))
    with caplog.at_level(logging.INFO, LOGGER):
        assert log.once(("config", "hedge"), "hedging is on for %s", "digits")
        assert not log.once(("config", "hedge"), "hedging is on for %s", "digits")
    assert messages(caplog) == ["hedging is on for digits"]

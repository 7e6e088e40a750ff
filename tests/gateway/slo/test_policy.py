from __future__ import annotations

import logging

import pytest

from gateway.slo.config import BurnPolicyConfig, SloConfig
from gateway.slo.engine import SloBook
from gateway.slo.policy import NORMAL, BurnPolicy, PolicyAdjustment
from tests.gateway.slo.traffic import traffic
from tests.support.clock import FakeClock

ON = BurnPolicyConfig(enabled=True)


def test_engages_while_fast_burn_and_disengages_after() -> None:
    clock = FakeClock()
    policy = BurnPolicy("digits", ON, clock)
    assert policy.update(False) is NORMAL
    engaged = policy.update(True, "fast burn: x")
    assert engaged == PolicyAdjustment(
        retry_budget_factor=0.5,
        hedging_enabled=False,
        fallback_margin_factor=2.0,
        reason="fast burn: x",
    )
    assert policy.engaged and policy.since == clock.wall()
    clock.advance(5)
    assert policy.update(True) is engaged  # no change while the burn lasts
    assert policy.update(False) is NORMAL
    assert not policy.engaged and policy.since == clock.wall()
    assert policy.changes == 2


def test_off_by_default() -> None:
    policy = BurnPolicy("digits", BurnPolicyConfig(), FakeClock())
    assert policy.update(True) is NORMAL
    assert policy.to_json()["enabled"] is False and policy.changes == 0


def test_logs_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    policy = BurnPolicy("digits", ON, FakeClock())
    with caplog.at_level(logging.INFO, logger="gateway.slo.policy"):
        for burning in (True, True, True, False, False):
            policy.update(burning)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "engaged" in messages[0] and "hedging off" in messages[0]
    assert "disengaged" in messages[1]


def test_book_tightens_a_burning_model_only_and_shows_it_in_slo() -> None:
    clock = FakeClock()
    slo = SloConfig(name="avail", kind="availability", objective=0.999)
    book = SloBook(
        {"digits": (slo,), "other": (slo,)},
        clock,
        policies={"digits": BurnPolicyConfig(enabled=True, retry_budget_factor=0.25)},
    )
    traffic(book, clock, 3600, model="other")
    traffic(book, clock, 3600)
    traffic(book, clock, 300, errors=5)
    adjustment = book.adjustment("digits")
    assert adjustment.retry_budget_factor == 0.25 and not adjustment.hedging_enabled
    assert adjustment.reason is not None and "page-1h-5m" in adjustment.reason
    assert book.adjustment("other") is NORMAL
    doc = book.to_json()["models"]["digits"]["policy"]
    assert doc["engaged"] is True and doc["adjustment"]["retry_budget_factor"] == 0.25
    traffic(book, clock, 1800)  # both page alerts have stopped
    assert book.adjustment("digits") is NORMAL
    assert book.to_json()["models"]["digits"]["policy"]["changes"] == 2
    assert book.adjustment("no-such-model") == NORMAL

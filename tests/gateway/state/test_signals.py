from __future__ import annotations

import pytest

from gateway.clock import FakeClock
from gateway.state.base import ReplicaSignal
from gateway.state.signals import SignalLedger


def test_local_transitions_take_the_next_epoch_and_are_queued_once() -> None:
    clock = FakeClock()
    ledger = SignalLedger("a", clock)
    first = ledger.local("r1", "open", ejected_until_wall=clock.wall() + 2)
    clock.advance(1)
    second = ledger.local("r1", "half-open")
    assert (first.epoch, second.epoch) == (1, 2)
    assert second.stamp == clock.wall() and second.origin == "a"
    assert ledger.take_unsent() == [second]  # only the latest per replica
    assert ledger.take_unsent() == []
    with pytest.raises(ValueError):
        ledger.local("r1", "ajar")


def test_observe_returns_only_newer_signals_of_other_instances() -> None:
    clock = FakeClock()
    ledger = SignalLedger("a", clock)
    mine = ledger.local("r1", "open")
    older = ReplicaSignal("r1", "closed", 0.0, 0, "b", clock.wall())
    newer = ReplicaSignal("r2", "open", 0.0, 4, "b", clock.wall())
    assert ledger.observe({"r1": older, "r2": newer}) == [newer]
    assert ledger.observe({"r1": mine, "r2": newer}) == []  # own and already known
    assert ledger.local("r2", "closed").epoch == 5  # continues after the highest seen


def test_a_newer_remote_signal_cancels_an_unsent_local_one() -> None:
    clock = FakeClock()
    ledger = SignalLedger("a", clock)
    ledger.local("r1", "open")
    remote = ReplicaSignal("r1", "closed", 0.0, 3, "b", clock.wall())
    assert ledger.observe({"r1": remote}) == [remote]
    assert ledger.take_unsent() == []
    assert ledger.latest("r1") == remote
    assert ledger.snapshot()["r1"]["local"] is False

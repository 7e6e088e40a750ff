from __future__ import annotations

import pytest

from gateway.state.base import SIGNAL_TTL_S, ReplicaSignal
from gateway.state.signals import FORGET_EVERY_S, SignalBook
from tests.support.clock import FakeClock


def test_local_transitions_take_the_next_epoch_and_are_queued_once() -> None:
    clock = FakeClock()
    ledger = SignalBook("a", clock)
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
    ledger = SignalBook("a", clock)
    mine = ledger.local("r1", "open")
    older = ReplicaSignal("r1", "closed", 0.0, 0, "b", clock.wall())
    newer = ReplicaSignal("r2", "open", 0.0, 4, "b", clock.wall())
    assert ledger.observe({"r1": older, "r2": newer}) == [newer]
    assert ledger.observe({"r1": mine, "r2": newer}) == []  # own and already known
    assert ledger.local("r2", "closed").epoch == 5  # continues after the highest seen


def test_a_newer_remote_signal_cancels_an_unsent_local_one() -> None:
    clock = FakeClock()
    ledger = SignalBook("a", clock)
    ledger.local("r1", "open")
    remote = ReplicaSignal("r1", "closed", 0.0, 3, "b", clock.wall())
    assert ledger.observe({"r1": remote}) == [remote]
    assert ledger.take_unsent() == []
    assert ledger.latest("r1") == remote
    assert ledger.snapshot()["r1"]["local"] is False


def test_an_expired_remote_signal_is_not_applied_but_its_epoch_still_counts() -> None:
    clock = FakeClock()
    ledger = SignalBook("a", clock)
    old = ReplicaSignal("r1", "open", 0.0, 6, "b", clock.wall() - SIGNAL_TTL_S - 1)
    assert ledger.observe({"r1": old}) == []  # it tells nothing any more
    assert ledger.latest("r1") == old  # but the store still holds it: it orders
    assert ledger.local("r1", "closed").epoch == 7  # so this one outranks it, not refused


def test_an_expired_signal_is_forgotten_once_the_store_dropped_it() -> None:
    clock = FakeClock()
    ledger = SignalBook("a", clock)
    remote = ReplicaSignal("r1", "open", clock.wall() + 30, 4, "b", clock.wall())
    assert ledger.observe({"r1": remote}) == [remote]
    clock.advance(SIGNAL_TTL_S + 31)  # past its ejection and the ttl
    assert ledger.observe({"r1": remote}) == []  # still in the store: kept
    assert "r1" in ledger.snapshot()
    clock.advance(FORGET_EVERY_S)
    assert ledger.observe({}) == []  # the store pruned it
    assert ledger.latest("r1") is None and ledger.snapshot() == {}
    assert ledger.local("r1", "open").epoch == 1  # the store has no entry left to outrank
    assert ledger.observe({"r1": remote}) == []  # a straggler resending it is not applied


def test_local_signals_expire_unannounced_and_are_forgotten_without_a_store() -> None:
    clock = FakeClock()
    ledger = SignalBook("a", clock)
    ledger.local("r1", "open")
    clock.advance(SIGNAL_TTL_S)
    assert ledger.take_unsent() == []  # expired before it was sent: not announced
    assert ledger.snapshot() == {}  # never pulled: nothing else holds it


def test_rollouts_leave_no_trail_of_replica_ids() -> None:
    """A month of daily rollouts, each bringing 20 replicas with fresh ids that open once."""
    clock = FakeClock()
    ledger = SignalBook("a", clock)
    store: dict[str, ReplicaSignal] = {}
    for day in range(30):
        for i in range(20):
            signal = ReplicaSignal(f"10.0.{day}.{i}:8000", "open", 0.0, 1, "b", clock.wall())
            store[signal.replica_id] = signal
        ledger.observe(store)
        assert len(ledger.snapshot()) == 20  # today's; yesterday's left the store and here
        clock.advance(86_400)
        store = {r: s for r, s in store.items() if s.expires_at() > clock.wall()}  # as stores do
    ledger.observe(store)
    assert len(ledger.snapshot()) == 0
    assert len(ledger.take_unsent()) == 0

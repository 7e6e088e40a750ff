"""A rollout's progress is a decision, but not an operator's control of a replica or pool:
``/admin/state`` and ``/admin/controls`` list only those (``/admin/rollouts`` shows it)."""

from __future__ import annotations

from gateway.state.decisions import DecisionBook
from gateway.upstream.controls import ManualControls
from gateway.upstream.registry import Registry
from tests.gateway.conftest import make_config
from tests.support.clock import FakeClock


def test_the_controls_view_lists_replicas_and_pools_only() -> None:
    clock = FakeClock()
    book = DecisionBook("gw")
    book.decide("replica:r0", "drain", "alice", "", clock.wall())
    book.decide("rollout:digits", "canary", "rule:config", '{"trail": []}', clock.wall())
    controls = ManualControls(Registry(make_config(), clock), clock)
    assert list(controls.snapshot(book.known)) == ["replica:r0"]

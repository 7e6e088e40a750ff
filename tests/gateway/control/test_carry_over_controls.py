"""A reload keeps operators' decisions: the new gateway obeys them before it takes traffic."""

from __future__ import annotations

from gateway.control.carry_over import carry_over
from gateway.control.runtime import Gateway
from gateway.upstream.eligibility import eligible
from tests.gateway.conftest import make_config


def test_a_reload_keeps_drains_and_pauses() -> None:
    old, new = Gateway(make_config()), Gateway(make_config())
    old.shared.decide("replica:r1", "drain", "alice", "disk")
    old.shared.decide("pool:p", "pause", "bob", "")
    carry_over(old, new)
    pool = new.registry.pools["p"]
    assert [r.id for r in pool.draining] == ["r1"]
    assert pool.paused == "paused by bob" and eligible(pool, set(), new.clock.now()) == []
    new.shared.decide("pool:p", "resume", "bob", "")
    assert [r.id for r in eligible(pool, set(), new.clock.now())] == ["r0", "r2"]
    decision = new.shared.decisions.get("replica:r1")
    assert decision is not None and decision.by == "alice" and decision.version == 1

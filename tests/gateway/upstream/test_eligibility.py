"""Eligibility and panic: computed from the pool's state, never written into it."""

from __future__ import annotations

from gateway.upstream.eligibility import eligible, in_panic
from gateway.upstream.registry import Registry
from tests.gateway.conftest import make_config
from tests.support.clock import FakeClock


def test_panic_is_computed_from_the_replicas_now() -> None:
    clock = FakeClock()
    registry = Registry(make_config(replicas=4), clock)
    pool = registry.pools["p"]
    assert not in_panic(pool, clock.now())
    pool.replicas[0].mark_health(False)
    pool.replicas[1].eject(clock.now(), 5.0, "test")
    assert not in_panic(pool, clock.now())  # 2 of 4 usable: the 50 % threshold is met
    assert [r.id for r in eligible(pool, set(), clock.now())] == ["r2", "r3"]
    pool.replicas[2].quarantine(clock.now(), 60.0, "wrong answers")
    assert in_panic(pool, clock.now())
    assert registry.snapshot()[0]["panic"] is True
    # panic spreads over all but the quarantined; those tried are left out
    assert [r.id for r in eligible(pool, {"r3"}, clock.now())] == ["r0", "r1"]
    clock.advance(5.0)  # the ejection ends: 2 of 4 usable again, and the snapshot says so
    assert not in_panic(pool, clock.now())
    assert registry.snapshot()[0]["panic"] is False


def test_eligible_writes_nothing() -> None:
    clock = FakeClock()
    registry = Registry(make_config(replicas=3), clock)
    pool = registry.pools["p"]
    for replica in pool.replicas[:2]:
        replica.mark_health(False)
    before = registry.snapshot()
    assert before[0]["panic"] is True
    assert [r.id for r in eligible(pool, set(), clock.now())] == ["r0", "r1", "r2"]
    assert registry.snapshot() == before
    assert not hasattr(pool, "panic")

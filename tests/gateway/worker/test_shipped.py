"""A worker's stand-ins ship records in the order the control must see them."""

from __future__ import annotations

from typing import Any, cast

from gateway.config.endpoint import Endpoint
from gateway.faults.classify import classify_status
from gateway.outcome import Outcome, OutcomeKind
from gateway.snapshot.shipper import BatchShipper
from gateway.upstream.registry import Pool
from gateway.upstream.replica import Replica
from gateway.worker.shipped import ShippedMetrics, ShippedReactions
from tests.support.clock import FakeClock


class _Pool:
    name = "p"


def _rig() -> tuple[BatchShipper, ShippedReactions, Pool, Replica, Replica]:
    shipper = BatchShipper(FakeClock(), lambda batch: None, worker=0)
    reactions = ShippedReactions(shipper, ShippedMetrics(shipper))
    r0 = Replica(id="r0", pool="p", endpoint=Endpoint("127.0.0.1", 1))
    r1 = Replica(id="r1", pool="p", endpoint=Endpoint("127.0.0.1", 2))
    return shipper, reactions, cast(Pool, _Pool()), r0, r1


def _calls(shipper: BatchShipper) -> list[tuple[str, Any]]:
    return [(call.method, call.args) for call in shipper.ship().calls]


def test_a_later_charge_ships_the_successes_tallied_before_it_first() -> None:
    # a vote's refusal charged after more answers of the same replica: the control must see
    # S S then the charge, so that the charge starts a streak rather than being wiped by them
    shipper, reactions, pool, r0, r1 = _rig()
    refused = classify_status("r0", 503, 0.01)
    reactions.fleet("digits", pool, r0, refused, False)  # its verdict waits for evidence
    reactions.fleet("digits", pool, r0, Outcome(OutcomeKind.SUCCESS, "r0", 0.02), True)
    reactions.fleet("digits", pool, r1, Outcome(OutcomeKind.SUCCESS, "r1", 0.03), True)
    reactions.fleet("digits", pool, r0, Outcome(OutcomeKind.SUCCESS, "r0", 0.04), True)
    reactions.charged(pool, r0, refused)
    calls = _calls(shipper)
    assert [(method, args[:3]) for method, args in calls] == [
        ("attempt", ("digits", "p", "r0")),
        ("successes", ("digits", "p", "r0")),
        ("charged", ("p", "r0", calls[2][1][2])),
        ("successes", ("digits", "p", "r1")),
    ]
    assert calls[1][1][3] == [0.02, 0.04]
    assert r0.consecutive_failures == 1  # charged here too, for this worker's own breaker


def test_a_success_judged_later_ships_as_an_attempt_of_its_own() -> None:
    shipper, reactions, pool, r0, _ = _rig()
    reactions.fleet("digits", pool, r0, Outcome(OutcomeKind.SUCCESS, "r0", 0.02), False)
    assert [method for method, _ in _calls(shipper)] == ["attempt"]

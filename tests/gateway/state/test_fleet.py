"""The fleet view on a fake clock: who is alive or stale by last seen, who is gone, each
replica's verdict per instance, and what it says without shared state."""

from __future__ import annotations

import pytest

from gateway.state.fleet import (
    HEARTBEAT_TTL_S,
    STALE_AFTER_S,
    THIS_INSTANCE_ONLY,
    Heartbeat,
    fleet_document,
    take_heartbeats,
)
from tests.support.clock import FakeClock


def _beat(instance: str, seen: float, **verdicts: str) -> Heartbeat:
    return Heartbeat(instance, "0.1.0", 100.0, seen, 12.5, 0.02, verdicts)


def test_instances_are_alive_until_their_heartbeat_is_stale_then_gone() -> None:
    clock = FakeClock()
    others = {"gw-b": _beat("gw-b", clock.wall(), r1="serving")}
    scope = "every gateway of namespace 'gw' (redis)"

    def view() -> dict[str, dict[str, object]]:
        doc = fleet_document(_beat("gw-a", clock.wall()), others, clock.wall(), scope=scope)
        assert doc["shared"] and doc["scope"] == scope
        return {i["instance"]: i for i in doc["instances"]}

    assert view()["gw-b"]["alive"] is True
    clock.advance(STALE_AFTER_S - 0.5)
    assert view()["gw-b"]["alive"] is True and view()["gw-b"]["age_s"] == STALE_AFTER_S - 0.5
    clock.advance(1.0)
    assert view()["gw-b"]["alive"] is False  # last seen too long ago: stale, still listed
    assert view()["gw-a"]["alive"] is True  # this instance is alive by being asked
    clock.advance(HEARTBEAT_TTL_S)
    assert list(view()) == ["gw-a"]  # its heartbeat expired: gone


def test_this_instance_comes_first_and_verdicts_are_per_instance() -> None:
    own = _beat("gw-m", 1000.0, r1="serving", r2="unhealthy")
    others = {
        "gw-z": _beat("gw-z", 999.0, r1="ejected", r2="unhealthy"),
        "gw-a": _beat("gw-a", 999.5, r1="serving", r3="not probed"),
        "gw-m": _beat("gw-m", 990.0, r1="drained"),  # its own last published one: superseded
    }
    doc = fleet_document(own, others, 1000.0, scope="ns")
    assert [i["instance"] for i in doc["instances"]] == ["gw-m", "gw-a", "gw-z"]
    assert [i["self"] for i in doc["instances"]] == [True, False, False]
    assert doc["alive"] == 3
    assert doc["replicas"] == {
        "r1": {"gw-m": "serving", "gw-a": "serving", "gw-z": "ejected"},
        "r2": {"gw-m": "unhealthy", "gw-z": "unhealthy"},
        "r3": {"gw-a": "not probed"},
    }
    first = doc["instances"][0]
    assert (first["rate"], first["error_rate"], first["version"]) == (12.5, 0.02, "0.1.0")


def test_without_shared_state_it_says_this_instance_only() -> None:
    doc = fleet_document(_beat("gw-a", 5.0, r1="serving"), {}, 5.0, scope=None)
    assert doc["shared"] is False and doc["scope"] == THIS_INSTANCE_ONLY
    assert [i["instance"] for i in doc["instances"]] == ["gw-a"]


def test_a_heartbeat_travels_exactly_and_a_malformed_one_is_refused() -> None:
    beat = _beat("gw-a", 1234.125, r1="breaker open")
    assert Heartbeat.decode(beat.encode()) == beat
    for bad in ('["gw-a", "v"]', '["a", "v", 1, 2, 3, 4, ["not", "a", "map"]]'):
        with pytest.raises(ValueError):
            Heartbeat.decode(bad)


def _run(instance: str, started: float, seen: float) -> Heartbeat:
    return Heartbeat(instance, "0.1.0", started, seen, 1.0, 0.0, {})


def test_a_heartbeat_from_another_run_is_ignored_while_the_live_one_beats() -> None:
    """Two runs under one name (a forgery, or two gateways given one ``state.instance``): the
    run seen first keeps the name until it goes quiet, then the other takes it."""
    wall = 10_000.0
    live = _run("gw-b", 100.0, wall - 1)
    other = _run("gw-b", 200.0, wall)
    taken, left = take_heartbeats({"gw-b": live}, {"gw-b": other}, None, wall)
    assert taken == {"gw-b": live}
    assert left == [("gw-b", "from another run than its live heartbeat")]
    later = wall + STALE_AFTER_S
    taken, left = take_heartbeats(taken, {"gw-b": _run("gw-b", 200.0, later)}, None, later)
    assert taken["gw-b"].started == 200.0 and left == []  # the first went quiet: a restart
    newer = _run("gw-b", 200.0, later + 2)  # the same run, beating on
    assert take_heartbeats(taken, {"gw-b": newer}, None, later + 2) == ({"gw-b": newer}, [])


def test_a_heartbeat_from_the_future_leaves_the_live_one_in_place() -> None:
    wall = 10_000.0
    live = _run("gw-b", 100.0, wall - 1)
    forged = _run("gw-b", 100.0, wall + 365 * 86_400)
    taken, left = take_heartbeats({"gw-b": live}, {"gw-b": forged}, None, wall)
    assert taken == {"gw-b": live} and left == [("gw-b", "published in the future")]
    taken, left = take_heartbeats({}, {"gw-b": forged}, None, wall)
    assert taken == {} and left == [("gw-b", "published in the future")]


def test_a_heartbeat_under_this_instances_name_from_another_run_is_counted() -> None:
    wall = 10_000.0
    own = _run("gw-a", 100.0, wall)
    forged = _run("gw-a", 300.0, wall)
    taken, left = take_heartbeats({}, {"gw-a": forged, "gw-b": _run("gw-b", 5.0, wall)}, own, wall)
    assert set(taken) == {"gw-b"}
    assert left == [("gw-a", "under this instance's name, from another run")]
    assert take_heartbeats({}, {"gw-a": own}, own, wall) == ({"gw-a": own}, [])

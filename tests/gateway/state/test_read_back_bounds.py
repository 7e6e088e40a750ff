"""Values read back from a store or the decisions file are checked by the models that write
them: each forged value of the review is refused, a valid one travels unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from gateway.state.base import ReplicaSignal
from gateway.state.decision_file import read_decisions, write_decisions
from gateway.state.decisions import Decision, DecisionBook
from gateway.state.fleet import Heartbeat, fleet_document
from gateway.state.limits import MAX_INT64, MAX_VERDICTS, MAX_WALL_S
from gateway.state.rejects import Rejects

WALL = 1_800_000_000.0
CENTURIES = WALL + 228 * 365 * 86_400  # "ejected until +228 years"


def decision_row(**change: object) -> list[object]:
    row: dict[str, object] = {
        "key": "replica:r0",
        "action": "drain",
        "until": 0.0,
        "by": "alice",
        "reason": "disk",
        "at": WALL,
        "version": 3,
        "origin": "gw-a",
    }
    row.update(change)
    return list(row.values())


def test_a_valid_decision_signal_and_heartbeat_travel_unchanged() -> None:
    decision = Decision("replica:r0", "eject", WALL + 60, "alice", "disk", WALL, 7, "gw-a")
    assert Decision.decode(decision.encode()) == decision
    assert orjson.loads(decision.encode()) == decision_row(
        action="eject", until=WALL + 60, version=7
    )
    signal = ReplicaSignal("r0", "open", WALL + 30, 4, "gw-a", WALL)
    assert ReplicaSignal.decode(signal.encode()) == signal
    beat = Heartbeat("gw-a", "0.1.0", WALL - 10, WALL, 3.5, 0.01, {"r0": "serving"})
    assert Heartbeat.decode(beat.encode()) == beat


@pytest.mark.parametrize(
    "change",
    [
        {"version": 1e25},  # the review's: a float no int64 holds
        {"version": 10**25},
        {"version": -1},
        {"version": True},
        {"version": "3"},
        {"reason": "x" * 20_000_000},  # a 20 MB reason
        {"reason": "x" * 501},  # over what an operator may give
        {"action": "explode"},
        {"action": "pause"},  # a pool's action on a replica
        {"key": "nothing"},
        {"key": "replica:"},
        {"action": "eject", "until": CENTURIES},
        {"action": "eject", "until": WALL + 8 * 86_400},  # past the longest eject
        {"at": float(MAX_WALL_S) * 2},
        {"by": "b" * 300},
    ],
    ids=lambda change: ",".join(f"{k}={str(v)[:12]}" for k, v in change.items()),
)
def test_a_forged_decision_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Decision.decode(json.dumps(decision_row(**change)))  # orjson writes no 10**25


def test_a_rollout_progress_may_be_long_but_not_unbounded() -> None:
    row = decision_row(key="rollout:digits", action="canary", reason="y" * 100_000)
    assert Decision.decode(orjson.dumps(row)).reason == "y" * 100_000
    with pytest.raises(ValueError):
        Decision.decode(orjson.dumps(decision_row(key="rollout:digits", action="drain")))


@pytest.mark.parametrize(
    "row",
    [
        ["r0", "open", CENTURIES, 4, "gw-a", WALL],  # ejected for 228 years
        ["r0", "open", 0.0, 1e25, "gw-a", WALL],
        ["r0", "molten", 0.0, 4, "gw-a", WALL],
        ["r" * 300, "open", 0.0, 4, "gw-a", WALL],
        ["r0", "open", -5.0, 4, "gw-a", WALL],
    ],
)
def test_a_forged_signal_is_refused(row: list[object]) -> None:
    with pytest.raises(ValueError):
        ReplicaSignal.decode(orjson.dumps(row))


@pytest.mark.parametrize(
    "verdicts",
    [
        {f"ghost-{i}": "serving" for i in range(50_000)},  # the 50 k-verdict ghost
        {"r0": "on fire"},
    ],
    ids=["50k-verdicts", "unknown-word"],
)
def test_a_forged_heartbeat_is_refused(verdicts: dict[str, str]) -> None:
    row = ["ghost", "0.1.0", WALL - 10, WALL, 1.0, 0.0, verdicts]
    with pytest.raises(ValueError):
        Heartbeat.decode(orjson.dumps(row))
    with pytest.raises(ValueError):
        Heartbeat.decode(orjson.dumps(["ghost", "0.1.0", WALL, WALL, 1.0, 2.0, {}]))


def test_the_fleet_view_lists_no_heartbeat_from_the_future_and_stays_bounded() -> None:
    own = Heartbeat("gw-a", "0.1.0", WALL - 10, WALL, 1.0, 0.0, {"r0": "serving"})
    others = {
        f"g{i}": Heartbeat(
            f"g{i}",
            "0.1.0",
            WALL - 10,
            WALL - i * 0.001,
            1.0,
            0.0,
            {f"x{i}-{j}": "serving" for j in range(20)},
        )
        for i in range(400)
    }
    others["dead"] = Heartbeat("dead", "0.1.0", WALL - 10, WALL + 86_400 * 365, 1.0, 0.0, {})
    doc = fleet_document(own, others, WALL, scope="every gateway")
    names = [i["instance"] for i in doc["instances"]]
    assert "dead" not in names and names[0] == "gw-a"
    assert len(names) == 256 and doc["not_listed"] == 400 - 255
    assert len(doc["replicas"]) <= MAX_VERDICTS and "r0" in doc["replicas"]


def test_a_book_refuses_what_its_vet_refuses_and_then_outranks_it() -> None:
    rejects = Rejects()
    book = DecisionBook("gw-b", rejects)
    mine = book.decide("rollout:digits", "canary", "rule:config", "{}", WALL)
    book.take_unsent()
    book.vet = lambda d: "forged" if d.action == "promoted" else None
    forged = Decision("rollout:digits", "promoted", 0.0, "alice", "{}", WALL, 9_000, "gw-x")
    assert book.observe({forged.key: forged}, WALL) == []
    assert book.get(forged.key) == mine and book.take_unsent() == []  # nothing offered back
    assert rejects.counts[("store", "progress")] == 1
    later = book.decide("rollout:digits", "canary", "rule:evidence", "{}", WALL + 1)
    assert later.supersedes(forged)  # so the store takes it in the forged one's place


def test_a_decision_stamped_in_the_future_is_not_obeyed() -> None:
    book = DecisionBook("gw-b")
    future = Decision("replica:r0", "drain", 0.0, "alice", "", WALL + 86_400, 2, "gw-x")
    assert book.observe({future.key: future}, WALL) == []
    assert book.get(future.key) is None


def test_versions_stop_at_int64s_end_and_order_by_time_there() -> None:
    book = DecisionBook("gw-b")
    top = Decision("replica:r0", "drain", 0.0, "mallory", "", WALL, MAX_INT64, "gw-x")
    assert book.observe({top.key: top}, WALL) == [top]
    restore = book.decide("replica:r0", "restore", "alice", "", WALL + 1)
    assert restore.version == MAX_INT64 and restore.supersedes(top)
    assert Decision.decode(restore.encode()) == restore


def test_a_decisions_file_with_a_version_of_1e25_is_read_without_it(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    good = Decision("replica:r1", "drain", 0.0, "alice", "disk", WALL, 2, "gw-a")
    forged = orjson.dumps(decision_row(key="replica:r0", version=1e25))
    path.write_bytes(forged + b"\n" + good.encode().encode() + b"\n")
    rejects = Rejects()
    decisions = read_decisions(str(path), WALL, rejects)
    assert decisions == {good.key: good}
    assert rejects.counts[("decisions_file", "decision")] == 1
    book = DecisionBook("gw-a")
    book.adopt(decisions)
    book.decide("replica:r0", "drain", "bob", "", WALL + 5)  # an operator's next action
    write_decisions(str(path), book.known)  # persisted: nothing unencodable is left
    assert set(read_decisions(str(path), WALL + 10)) == {"replica:r0", "replica:r1"}

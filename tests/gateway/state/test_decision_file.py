"""`state.decisions_file`: a lone gateway's operators' decisions survive its restart."""

from __future__ import annotations

from pathlib import Path

from gateway.config.state import StateConfig
from gateway.control.runtime import Gateway
from gateway.state.decision_file import read_decisions, write_decisions
from gateway.state.decisions import Decision
from gateway.state.rejects import Rejects
from tests.gateway.conftest import make_config


def with_file(path: Path) -> Gateway:
    config = make_config()
    state = StateConfig(decisions_file=str(path))
    return Gateway(config.model_copy(update={"state": state}))


async def test_a_restarted_gateway_reads_its_decisions_back(tmp_path: Path) -> None:
    path = tmp_path / "state" / "decisions"
    first = with_file(path)
    first.shared.decide("replica:r1", "drain", "alice", "disk")
    first.shared.decide("pool:p", "pause", "bob", "")
    first.shared.decide("pool:p", "resume", "bob", "")
    assert await first.shared.publish() is None
    again = with_file(path)  # a new process, as far as the gateway can tell
    pool = again.registry.pools["p"]
    assert [r.id for r in pool.draining] == ["r1"] and pool.paused is None
    decision = again.shared.decisions.get("pool:p")
    assert decision is not None and decision.action == "resume" and decision.version == 2


def test_a_damaged_line_is_skipped_and_the_newest_decision_wins(tmp_path: Path) -> None:
    path = tmp_path / "decisions"
    old = Decision("replica:r1", "drain", 0.0, "alice", "", 1.0, 1, "gw")
    new = Decision("replica:r1", "restore", 0.0, "bob", "", 2.0, 2, "gw")
    write_decisions(str(path), {"x": new})
    path.write_bytes(old.encode().encode() + b"\nnot json\n" + path.read_bytes())
    assert read_decisions(str(path), 10.0) == {"replica:r1": new}
    assert read_decisions(str(tmp_path / "none yet"), 10.0) == {}


def test_a_line_stamped_past_the_clock_is_ignored_and_counted(tmp_path: Path) -> None:
    """As the store's pull refuses one: a drain stamped a year ahead is not obeyed at start
    (nor kept: the file is rewritten from what was read), one 4 minutes ahead is (skew)."""
    wall = 1_800_000_000.0
    path = tmp_path / "decisions"
    forged = Decision("replica:r1", "drain", 0.0, "mallory", "", wall + 365 * 86_400, 9, "gw")
    skewed = Decision("replica:r2", "drain", 0.0, "alice", "", wall + 240, 1, "gw")
    write_decisions(str(path), {"a": forged, "b": skewed})
    rejects = Rejects()
    assert read_decisions(str(path), wall, rejects) == {"replica:r2": skewed}
    assert rejects.counts[("decisions_file", "decision")] == 1


async def test_a_gateway_does_not_obey_a_drain_stamped_in_the_future(tmp_path: Path) -> None:
    path = tmp_path / "decisions"
    gateway = with_file(tmp_path / "probe")  # its clock's wall time
    wall = gateway.clock.wall()
    forged = Decision("replica:r1", "drain", 0.0, "mallory", "", wall + 365 * 86_400, 9, "gw")
    write_decisions(str(path), {"a": forged})
    again = with_file(path)
    assert not again.registry.pools["p"].draining
    assert again.shared.rejects.counts[("decisions_file", "decision")] == 1

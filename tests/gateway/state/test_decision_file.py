"""`state.decisions_file`: a lone gateway's operators' decisions survive its restart."""

from __future__ import annotations

from pathlib import Path

from gateway.config.state import StateConfig
from gateway.runtime import Gateway
from gateway.state.decision_file import read_decisions, write_decisions
from gateway.state.decisions import Decision
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
    assert read_decisions(str(path)) == {"replica:r1": new}
    assert read_decisions(str(tmp_path / "none yet")) == {}

"""Each model's path is assembled for what it uses, and `check-config --explain` shows it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gateway import cli
from gateway.config import parse_config
from gateway.pipeline.build import explain, plan
from tests.gateway.conftest import make_config
from tests.gateway.pipeline.rig import A, Rig

POOL = {"model": "m", "replicas": [{"id": "r", "url": "http://127.0.0.1:9"}]}


def test_a_plain_model_has_no_fallback_hedge_vote_or_rollout_stage() -> None:
    stages = plan(make_config().models["digits"]).stages()
    assert stages == ["admission", "deadline", "route(single)", "retry", "balance", "attempt"]


def test_a_model_pays_for_the_fallback_and_the_hedge_it_declares() -> None:
    model = make_config(hedge={"enabled": True}, fallback={"model": "digits-logreg"})
    assert plan(model.models["digits"]).stages() == [
        "admission",
        "deadline",
        "fallback(digits-logreg)",
        "route(single)",
        "retry",
        "hedge",
        "balance",
        "attempt",
    ]


def test_explain_names_the_edge_then_the_route_a_vote_or_a_rollout_takes() -> None:
    config = parse_config(
        {
            "pools": {
                "a": POOL,
                "b": {**POOL, "replicas": [{"id": "s", "url": "http://127.0.0.1:8"}]},
            },
            "models": {
                "v": {"vote": {"pools": ["a", "b"], "quorum": 2}},
                "r": {"pool": "a", "rollout": {"candidate": "b", "mode": "canary"}},
            },
        }
    )
    assert explain(config, "v")[:2] == ["tenant: anonymous only (no keys)", "model"]
    assert "route(vote: k legs, then a vote)" in explain(config, "v")
    assert "route(rollout: pool or candidate, a copy compared off-path)" in explain(config, "r")


async def test_the_assembled_path_serves_and_counts_each_request_once() -> None:
    rig = Rig(make_config(replicas=1))
    for _ in range(3):
        result = await rig.pipeline.handler(rig.call())
        assert result.status == 200 and result.served_by == "r0"
    assert len(rig.transport.calls[A]) == 3
    assert rig.budget._window() == (3, 0)  # three requests towards the allowance, no retries


def test_check_config_explain_prints_the_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"pools": {"p": POOL}, "models": {"m": {"pool": "p"}}}))
    assert cli.main(["check-config", "--no-files", "--explain", "m", str(path)]) == 0
    out = capsys.readouterr().out
    assert "m: tenant: anonymous only (no keys) -> model -> body" in out
    assert "route(single) -> retry -> balance -> attempt" in out and "hedge" not in out
    assert cli.main(["check-config", "--no-files", "--explain", "nope", str(path)]) == 2
    assert "no model 'nope'" in capsys.readouterr().err

"""Audits and the burn policy's vote in the config: where they may be declared, what they
name, and each worker's share of their bounds."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import parse_config
from gateway.config.loader import ConfigError
from gateway.config.shares import worker_share

CORRECT = {"name": "right", "kind": "correctness", "objective": 0.999}
VOTE = {"enabled": True}


def _config(**digits: Any) -> dict[str, Any]:
    pools = {
        name: {"model": name, "replicas": [{"id": f"{name}-0", "url": f"http://127.0.0.1:{port}"}]}
        for name, port in (("p", 9000), ("q", 9001), ("s", 9002))
    }
    return {"pools": pools, "models": {"digits": {"pool": "p", **digits}}}


def test_an_audited_model_with_its_escalation_loads() -> None:
    config = parse_config(
        _config(
            audit={"rate": 0.05, "against": "q"},
            slos=[CORRECT],
            vote_pools=["p", "q", "s"],
            burn_policy={"vote": {"enabled": True}},
        )
    )
    digits = config.models["digits"]
    assert digits.audit is not None and digits.audit.against == "q"
    vote = digits.escalation_vote
    assert vote is not None and vote.pools == ("p", "q", "s") and vote.quorum == 2


@pytest.mark.parametrize(
    ("digits", "words"),
    [
        ({"audit": {"rate": 0.0}}, "greater than 0"),
        ({"audit": {"rate": 0.1, "against": "nowhere"}}, "audit.against: unknown pool"),
        ({"vote_pools": ["p", "nowhere"]}, "vote_pools: unknown pool"),
        ({"vote_pools": ["p", "p"]}, "distinct"),
        (
            {"slos": [CORRECT], "vote_pools": ["p", "q"], "burn_policy": {"vote": VOTE}},
            "k=3 needs as many vote_pools",
        ),
        (
            {"vote_pools": ["p", "q", "s"], "burn_policy": {"vote": VOTE}},
            "engaged by a correctness SLO",
        ),
    ],
)
def test_what_an_audit_or_a_vote_escalation_names_is_checked(
    digits: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(_config(**digits))


def test_audits_are_for_a_single_route() -> None:
    raw = _config(audit={"rate": 0.1})
    raw["models"]["digits"] = {"vote": {"pools": ["p", "q", "s"]}, "audit": {"rate": 0.1}}
    with pytest.raises(ConfigError, match="audits are for a single route"):
        parse_config(raw)


def test_each_worker_takes_its_share_of_the_audits_and_the_votes_extra_legs() -> None:
    config = parse_config(
        _config(
            audit={"rate": 0.05, "max_in_flight": 9, "max_per_s": 10.0},
            slos=[CORRECT],
            vote_pools=["p", "q", "s"],
            burn_policy={"vote": {"enabled": True, "max_extra_in_flight": 7}},
        )
    )
    digits = worker_share(config, 2, 1 << 30).models["digits"]
    assert digits.audit is not None
    assert (digits.audit.max_in_flight, digits.audit.max_per_s) == (5, 5.0)
    assert digits.burn_policy.vote.max_extra_in_flight == 4

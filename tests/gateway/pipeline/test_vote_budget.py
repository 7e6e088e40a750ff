"""A vote and the retry budget: one client request counts once, and every send beyond a leg's
first (a retry inside a leg, a tie-break on a spare) is paid from the budget like a retry."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import GatewayConfig, parse_config
from gateway.errors import NoQuorum
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import Behaviour, reply
from tests.gateway.pipeline.rig import Rig, slow
from tests.gateway.pipeline.votes import MANIFEST, MODEL, answer, vote_call

# Pools a and b have a spare replica each (a tie-break can ask them), c has none.
REPLICAS = {"a": [9100, 9101], "b": [9200, 9201], "c": [9300]}


def spare_config() -> GatewayConfig:
    pools = {
        name: {
            "model": f"digits-{name}",
            "replicas": [
                {"id": f"{name}{i}", "url": f"http://127.0.0.1:{port}"}
                for i, port in enumerate(ports)
            ],
        }
        for name, ports in REPLICAS.items()
    }
    return parse_config(
        {
            "fallback_manifest": str(MANIFEST),
            "pools": pools,
            "models": {MODEL: {"vote": {"pools": list(REPLICAS), "quorum": 2}}},
        }
    )


def each_pool_answers(labels: dict[str, int]) -> dict[str, Behaviour]:
    """Every replica of pool ``name`` answers ``labels[name]``."""
    return {
        f"127.0.0.1:{port}": reply(200, answer(labels[name]))
        for name, ports in REPLICAS.items()
        for port in ports
    }


def _rig(labels: dict[str, int], **budget: Any) -> Rig:
    return Rig(spare_config(), each_pool_answers(labels), budget=budget or None)


async def test_a_vote_is_one_request_for_the_budgets_allowance() -> None:
    """Three legs are one client request: the allowance grows by ``ratio`` per request, not by
    three times that (which let every vote pay for retries of its own legs and others')."""
    rig = _rig({"a": 7, "b": 7, "c": 7})
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "3/3" and rig.transport.sent() == 3
    assert rig.budget.snapshot()["requests_in_window"] == 1
    assert rig.budget.spent_total == 0  # the legs' first sends are the request itself


async def test_tie_break_sends_are_paid_like_retries() -> None:
    """The legs split 1/2/3; the tie-break asks the spares of a and b: two more sends, two
    retries spent from the budget and recorded."""
    rig = _rig({"a": 1, "b": 2, "c": 3})
    with pytest.raises(NoQuorum):
        await rig.pipeline.handler(vote_call(rig))
    assert rig.transport.sent() == 5
    assert rig.budget.spent_total == 2 and rig.retries_recorded(MODEL) == 2


async def test_a_budget_with_no_retry_left_sends_no_tie_break() -> None:
    rig = _rig({"a": 1, "b": 2, "c": 3}, ratio=0.0, min_per_s=0.0)
    with pytest.raises(NoQuorum):
        await rig.pipeline.handler(vote_call(rig))
    assert rig.transport.sent() == 3  # the three legs only: no spare was asked
    assert rig.budget.spent_total == 0
    assert rig.budget.refused_total == 2 and rig.refusals_recorded(MODEL) == 2


async def test_a_budget_with_one_retry_left_pays_one_tie_break() -> None:
    rig = _rig({"a": 1, "b": 2, "c": 3}, ratio=0.0, min_per_s=0.1, window_s=10)  # one retry
    with pytest.raises(NoQuorum):
        await rig.pipeline.handler(vote_call(rig))
    assert rig.transport.sent() == 4 and rig.budget.spent_total == 1


async def test_a_retry_inside_a_leg_is_paid_and_the_request_still_counts_once() -> None:
    rig = Rig(spare_config())
    failed: list[str] = []

    async def first_fails(method: str, path: str, payload: bytes) -> Reply:
        """Pool a's first send gets a 503, its retry (on the other replica) an answer."""
        if not failed:
            failed.append(path)
            return await reply(503)(method, path, payload)
        return await reply(200, answer(7))(method, path, payload)

    late = slow(rig.clock, 0.1, reply(200, answer(7)))  # after a's retry (backoff ≤ 25 ms)
    rig.transport.behaviours.update(
        {"127.0.0.1:9100": first_fails, "127.0.0.1:9101": first_fails}
        | {f"127.0.0.1:{port}": late for name in "bc" for port in REPLICAS[name]}
    )
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "3/3" and failed
    assert rig.transport.sent() == 4  # a's two tries, b's and c's one
    assert rig.budget.spent_total == 1 and rig.retries_recorded(MODEL) == 1
    assert rig.budget.snapshot()["requests_in_window"] == 1

"""The vote route: k legs on distinct pools, a quorum, suspects, stragglers' grace, refusals."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import parse_config
from gateway.errors import NoQuorum, RejectedByReplicas
from gateway.v2.codec import decode_outputs
from tests.gateway.fakes import Behaviour, hang, reply
from tests.gateway.pipeline.rig import Rig, slow
from tests.gateway.pipeline.votes import MODEL, answer, by_pool, vote_call, vote_config


def _rig(behaviours: dict[str, Behaviour], **vote: Any) -> Rig:
    return Rig(vote_config(vote), by_pool(behaviours))


async def test_unanimous_vote() -> None:
    rig = _rig({k: reply(200, answer(7)) for k in "abc"})
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "3/3" and result.served_by == "a,b,c"
    assert decode_outputs(result.body, result.header_length)["label"].tolist() == [7]
    body = orjson.loads(result.body)
    assert body["model_name"] == MODEL and body["id"] == "req-1"
    assert body["parameters"] == {"vote": "3/3"}  # SDK users see no headers


async def test_a_dissenting_leg_is_outvoted_and_counted() -> None:
    rig = _rig({"a": reply(200, answer(7)), "b": reply(200, answer(7)), "c": reply(200, answer(2))})
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "2/3"
    assert decode_outputs(result.body, None)["label"].tolist() == [7]
    suspects = rig.pipeline.suspects.to_json()[MODEL]
    assert suspects["c"]["dissents"] == 1 and suspects["a"]["dissents"] == 0
    rig.pipeline.suspects.forget_replica("c")  # it left the gateway: its record goes too
    assert set(rig.pipeline.suspects.to_json()[MODEL]) == {"a", "b"}


async def test_a_persistent_dissenter_is_quarantined() -> None:
    rig = _rig(
        {"a": reply(200, answer(7)), "b": reply(200, answer(7)), "c": reply(200, answer(2))},
        suspect_min_votes=10,
        suspect_window=20,
        suspect_ratio=0.5,
    )
    for _ in range(10):
        await rig.pipeline.handler(vote_call(rig))
    result = await rig.pipeline.handler(vote_call(rig))
    assert "c" not in result.served_by and result.vote == "2/2"


async def test_binary_outputs_when_the_client_asks() -> None:
    rig = _rig({k: reply(200, answer(4)) for k in "abc"})
    outputs = [{"name": "label", "parameters": {"binary_data": True}}]
    result = await rig.pipeline.handler(vote_call(rig, outputs))
    assert result.header_length is not None
    decoded = decode_outputs(result.body, result.header_length)
    assert list(decoded) == ["label"] and decoded["label"].tolist() == [4]


async def test_no_quorum_without_fallback_is_a_clear_503() -> None:
    rig = _rig({"a": reply(200, answer(1)), "b": reply(200, answer(2)), "c": reply(200, answer(3))})
    with pytest.raises(NoQuorum, match="disagree") as info:
        await rig.pipeline.handler(vote_call(rig))
    assert info.value.status == 503


async def test_a_straggler_within_the_grace_still_votes() -> None:
    rig = _rig({k: reply(200, answer(7)) for k in "ab"}, straggler_grace_ms=20)
    rig.transport.behaviours["127.0.0.1:9300"] = slow(rig.clock, 0.015, reply(200, answer(2)))
    started = rig.clock.now()
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "2/3" and rig.clock.now() - started == pytest.approx(0.015)


async def test_a_straggler_past_the_grace_is_cancelled_and_missing() -> None:
    rig = _rig({"a": reply(200, answer(7)), "b": reply(200, answer(7)), "c": hang()})
    started = rig.clock.now()
    result = await rig.pipeline.handler(vote_call(rig))
    grace_s = rig.config.models[MODEL].vote.straggler_grace_ms / 1000  # type: ignore[union-attr]
    assert result.vote == "2/2" and rig.clock.now() - started == pytest.approx(grace_s)
    await rig.clock.idle()
    assert all(r.outstanding == 0 for r in rig.registry.replicas())


async def test_vote_legs_land_in_distinct_zones_when_they_can() -> None:
    pools = {
        "a": {
            "model": "digits-a",
            "replicas": [
                {"id": "a1", "url": "http://127.0.0.1:9100", "zone": "z1"},
            ],
        },
        "b": {
            "model": "digits-b",
            "replicas": [
                {"id": "b1", "url": "http://127.0.0.1:9200", "zone": "z1"},
                {"id": "b2", "url": "http://127.0.0.1:9201", "zone": "z2"},
            ],
        },
        "c": {
            "model": "digits-c",
            "replicas": [
                {"id": "c1", "url": "http://127.0.0.1:9300", "zone": "z1"},
                {"id": "c2", "url": "http://127.0.0.1:9301", "zone": "z2"},
                {"id": "c3", "url": "http://127.0.0.1:9302", "zone": "z3"},
            ],
        },
    }
    config = parse_config({"pools": pools, "models": {MODEL: {"vote": {"pools": ["a", "b", "c"]}}}})
    ports = (9100, 9200, 9201, 9300, 9301, 9302)
    for seed in range(10):
        rig = Rig(config, {f"127.0.0.1:{p}": reply(200, answer(5)) for p in ports}, seed=seed)
        result = await rig.pipeline.handler(vote_call(rig))
        assert sorted(result.served_by.split(",")) == ["a1", "b2", "c3"]


async def test_a_leg_that_refuses_is_a_missing_answer_and_is_charged() -> None:
    """One version refuses (a changed signature that still reports ready): the other two
    decide, and the refusal, refuted by their quorum, counts against its replica."""
    rig = _rig(
        {
            "a": reply(200, answer(7)),
            "b": reply(200, answer(7)),
            "c": reply(400, b'{"error": "unknown input \'input\'"}'),
        }
    )
    for _ in range(10):
        result = await rig.pipeline.handler(vote_call(rig))
        assert result.status == 200 and result.vote == "2/2"
        assert decode_outputs(result.body, None)["label"].tolist() == [7]
    refuser = next(r for r in rig.registry.replicas() if r.id == "c")
    assert refuser.failures >= 5 and "quorum" in (refuser.last_error or "")


async def test_legs_refusing_alike_are_the_requests_fault() -> None:
    refusal = reply(400, b'{"error": "shape [1, 64] does not match [-1, 8]"}')
    rig = _rig({"a": refusal, "b": refusal, "c": reply(200, answer(7))})
    with pytest.raises(RejectedByReplicas, match=r"answered 400: bad request$") as info:
        await rig.pipeline.handler(vote_call(rig))
    assert info.value.status == 400
    assert all(r.failures == 0 for r in rig.registry.replicas())


async def test_a_reply_for_another_request_is_never_an_answer() -> None:
    """A reply carrying another request's id (a desynchronised stream) is a protocol error:
    the leg is missing, the replica is charged, the vote decides on the rest."""
    stray = orjson.loads(answer(2))
    stray["id"] = "someone-else"
    rig = _rig(
        {
            "a": reply(200, answer(7)),
            "b": reply(200, answer(7)),
            "c": reply(200, orjson.dumps(stray)),
        }
    )
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "2/2"
    c = next(r for r in rig.registry.replicas() if r.id == "c")
    assert c.failures == 1 and "not the request's 'req-1'" in (c.last_error or "")


async def test_dissent_lines_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    """A dissenting replica writes one line per interval, not one per vote (34 in 20 s before)."""
    rig = _rig({"a": reply(200, answer(7)), "b": reply(200, answer(7)), "c": reply(200, answer(2))})
    with caplog.at_level("INFO", logger="gateway.voting.route"):
        for _ in range(20):
            await rig.pipeline.handler(vote_call(rig))
    lines = [r.getMessage() for r in caplog.records if "dissented" in r.getMessage()]
    assert len(lines) == 1 and "c dissented on 1 of 1 rows" in lines[0]
    rig.clock.advance(10.0)
    with caplog.at_level("INFO", logger="gateway.voting.route"):
        await rig.pipeline.handler(vote_call(rig))
    lines = [r.getMessage() for r in caplog.records if "dissented" in r.getMessage()]
    assert "(19 more dissents since its last line)" in lines[-1]


async def test_outputs_the_vote_does_not_compare_are_not_decoded() -> None:
    """A leg's other outputs are not the vote's business: garbage there (which decoding would
    refuse) leaves its compared label counted, not a missing answer."""
    garbage = orjson.loads(answer(7))
    garbage["outputs"].append({"name": "debug", "datatype": "FP32", "shape": [2], "data": ["x"]})
    legs = {"a": reply(200, orjson.dumps(garbage)), "b": reply(200, answer(7))}
    rig = _rig({**legs, "c": reply(200, answer(2))})
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "2/3" and result.served_by == "a,b,c"

"""Voting and the verified fallback through the real pipeline, on a scripted transport."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from gateway.clock import MonotonicClock
from gateway.config import GatewayConfig, parse_config
from gateway.config.policies import RetryBudgetConfig
from gateway.deadline import Deadline
from gateway.errors import NoQuorum, RejectedByReplicas, UpstreamFailed
from gateway.fallback.model import FallbackModel
from gateway.pipeline.build import Pipeline, build_pipeline
from gateway.pipeline.call import InferCall
from gateway.policies.budget import RetryBudget
from gateway.upstream.registry import Registry
from gateway.v2.codec import decode_outputs
from gateway.v2.request import parse_infer_request
from tests.gateway.fakes import Behaviour, FakeTransport, reply

MANIFEST = Path(__file__).resolve().parents[3] / "fallback_models" / "MANIFEST.json"
PORTS = {"a": 9100, "b": 9200, "c": 9300}


def _answer(label: int, top: float = 0.9) -> bytes:
    probabilities = np.full(10, (1 - top) / 9, dtype=np.float32)
    probabilities[label] = top
    return orjson.dumps(
        {
            "model_name": "m",
            "outputs": [
                {"name": "label", "datatype": "INT64", "shape": [1], "data": [label]},
                {
                    "name": "probabilities",
                    "datatype": "FP32",
                    "shape": [1, 10],
                    "data": probabilities.tolist(),
                },
            ],
        }
    )


def _config(**model: Any) -> GatewayConfig:
    pools = {
        name: {
            "model": f"digits-{name}",
            "replicas": [{"id": name, "url": f"http://127.0.0.1:{port}"}],
        }
        for name, port in PORTS.items()
    }
    return parse_config(
        {
            "fallback_manifest": str(MANIFEST),
            "pools": pools,
            "models": {"digits-vote": {"vote": {"pools": list(PORTS), "quorum": 2}, **model}},
        }
    )


def _call(config: GatewayConfig, outputs: list[dict[str, Any]] | None = None) -> InferCall:
    request: dict[str, Any] = {
        "id": "req-1",
        "inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}],
    }
    if outputs is not None:
        request["outputs"] = outputs
    body = orjson.dumps(request)
    return InferCall(
        model_name="digits-vote",
        model=config.models["digits-vote"],
        body=body,
        upstream_headers={},
        deadline=Deadline.after(MonotonicClock(), 2.0),
        request_id="t",
        request=parse_infer_request(body, None),
    )


async def _pipeline(config: GatewayConfig, behaviours: dict[str, Behaviour]) -> Pipeline:
    clock = MonotonicClock()
    transport = FakeTransport({f"127.0.0.1:{PORTS[k]}": v for k, v in behaviours.items()})
    fallbacks = {}
    if any(m.fallback for m in config.models.values()):
        model = FallbackModel(MANIFEST, "digits-logreg", clock)
        await model.verify()
        fallbacks["digits-logreg"] = model
    budget = RetryBudget(RetryBudgetConfig(), clock)
    return build_pipeline(
        Registry(config, clock), transport, budget, clock, random.Random(0), fallbacks
    )


async def test_unanimous_vote() -> None:
    config = _config()
    pipeline = await _pipeline(config, {k: reply(200, _answer(7)) for k in PORTS})
    result = await pipeline.handler(_call(config))
    assert result.vote == "3/3" and set(result.served_by.split(",")) == {"a", "b", "c"}
    outputs = decode_outputs(result.body, result.header_length)
    assert outputs["label"].tolist() == [7]
    body = orjson.loads(result.body)
    assert body["model_name"] == "digits-vote" and body["id"] == "req-1"


async def test_a_dissenting_leg_is_outvoted_and_counted() -> None:
    config = _config()
    pipeline = await _pipeline(
        config,
        {"a": reply(200, _answer(7)), "b": reply(200, _answer(7)), "c": reply(200, _answer(2))},
    )
    result = await pipeline.handler(_call(config))
    assert result.vote == "2/3"
    assert decode_outputs(result.body, None)["label"].tolist() == [7]
    suspects = pipeline.vote.suspects_snapshot()["digits-vote"]
    assert suspects["c"]["dissents"] == 1 and suspects["a"]["dissents"] == 0


async def test_a_persistent_dissenter_is_quarantined() -> None:
    config = _config()
    config = parse_config(
        {
            **config.model_dump(),
            "models": {
                "digits-vote": {
                    "vote": {
                        "pools": list(PORTS),
                        "quorum": 2,
                        "suspect_min_votes": 10,
                        "suspect_window": 20,
                        "suspect_ratio": 0.5,
                    }
                }
            },
        }
    )
    pipeline = await _pipeline(
        config,
        {"a": reply(200, _answer(7)), "b": reply(200, _answer(7)), "c": reply(200, _answer(2))},
    )
    for _ in range(10):
        await pipeline.handler(_call(config))
    result = await pipeline.handler(_call(config))
    assert "c" not in result.served_by and result.vote == "2/2"


async def test_binary_outputs_when_the_client_asks() -> None:
    config = _config()
    pipeline = await _pipeline(config, {k: reply(200, _answer(4)) for k in PORTS})
    outputs = [{"name": "label", "parameters": {"binary_data": True}}]
    result = await pipeline.handler(_call(config, outputs))
    assert result.header_length is not None
    decoded = decode_outputs(result.body, result.header_length)
    assert list(decoded) == ["label"] and decoded["label"].tolist() == [4]


async def test_no_quorum_without_fallback_is_a_clear_503() -> None:
    config = _config()
    pipeline = await _pipeline(
        config,
        {"a": reply(200, _answer(1)), "b": reply(200, _answer(2)), "c": reply(200, _answer(3))},
    )
    with pytest.raises(NoQuorum, match="disagree") as info:
        await pipeline.handler(_call(config))
    assert info.value.status == 503


async def test_no_quorum_falls_back_degraded() -> None:
    config = _config(fallback={"model": "digits-logreg"})
    pipeline = await _pipeline(
        config, {"a": reply(200, _answer(1)), "b": reply(500), "c": reply(500)}
    )
    result = await pipeline.handler(_call(config))
    assert result.served_by == "fallback/digits-logreg" and result.degraded == "no_quorum"
    assert decode_outputs(result.body, result.header_length)["label"].shape == (1,)


async def test_fallback_is_refused_when_tampered(tmp_path: Path) -> None:
    for name in ("MANIFEST.json", "digits-logreg.onnx", "digits-golden.json"):
        (tmp_path / name).write_bytes((MANIFEST.parent / name).read_bytes())
    model_file = tmp_path / "digits-logreg.onnx"
    data = bytearray(model_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    model_file.write_bytes(bytes(data))
    model = FallbackModel(tmp_path / "MANIFEST.json", "digits-logreg", MonotonicClock())
    status = await model.verify()
    assert not status.ok and "sha256 mismatch" in status.reason
    config = _config(fallback={"model": "digits-logreg"})
    clock = MonotonicClock()
    transport = FakeTransport({f"127.0.0.1:{p}": reply(500) for p in PORTS.values()})
    pipeline = build_pipeline(
        Registry(config, clock),
        transport,
        RetryBudget(RetryBudgetConfig(), clock),
        clock,
        random.Random(0),
        {"digits-logreg": model},
    )
    with pytest.raises((NoQuorum, UpstreamFailed)):
        await pipeline.handler(_call(config))


async def test_vote_legs_land_in_distinct_zones_when_they_can() -> None:
    pools = {
        "a": {
            "model": "digits-a",
            "replicas": [{"id": "a1", "url": "http://127.0.0.1:9100", "zone": "z1"}],
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
    config = parse_config(
        {"pools": pools, "models": {"digits-vote": {"vote": {"pools": ["a", "b", "c"]}}}}
    )
    clock = MonotonicClock()
    authorities = [
        "127.0.0.1:9100",
        "127.0.0.1:9200",
        "127.0.0.1:9201",
        "127.0.0.1:9300",
        "127.0.0.1:9301",
        "127.0.0.1:9302",
    ]
    transport = FakeTransport({k: reply(200, _answer(5)) for k in authorities})
    budget = RetryBudget(RetryBudgetConfig(), clock)
    for seed in range(10):
        pipeline = build_pipeline(
            Registry(config, clock), transport, budget, clock, random.Random(seed)
        )
        result = await pipeline.handler(_call(config))
        assert sorted(result.served_by.split(",")) == ["a1", "b2", "c3"]


async def test_a_leg_that_refuses_is_a_missing_answer_and_is_charged() -> None:
    """One version refuses (a changed signature that still reports ready): the other two
    decide, and the refusal, refuted by their quorum, counts against its replica."""
    config = _config()
    pipeline = await _pipeline(config, {
        "a": reply(200, _answer(7)), "b": reply(200, _answer(7)),
        "c": reply(400, b'{"error": "unknown input \'input\'"}'),
    })  # fmt: skip
    for _ in range(10):
        result = await pipeline.handler(_call(config))
        assert result.status == 200 and result.vote == "2/2"
        assert decode_outputs(result.body, None)["label"].tolist() == [7]
    refuser = next(r for r in pipeline.vote._registry.replicas() if r.id == "c")
    assert refuser.failures >= 5 and "quorum" in (refuser.last_error or "")


async def test_legs_refusing_alike_are_the_requests_fault() -> None:
    config = _config()
    refusal = reply(400, b'{"error": "shape [1, 64] does not match [-1, 8]"}')
    pipeline = await _pipeline(config, {"a": refusal, "b": refusal, "c": reply(200, _answer(7))})
    with pytest.raises(RejectedByReplicas, match="does not match") as info:
        await pipeline.handler(_call(config))
    assert info.value.status == 400
    assert all(r.failures == 0 for r in pipeline.vote._registry.replicas())


async def test_a_reply_for_another_request_is_never_an_answer() -> None:
    """A reply carrying another request's id (a desynchronised stream) is a protocol error:
    the leg is missing, the replica is charged, the vote decides on the rest."""
    config = _config()
    stray = orjson.loads(_answer(2))
    stray["id"] = "someone-else"
    pipeline = await _pipeline(config, {
        "a": reply(200, _answer(7)), "b": reply(200, _answer(7)),
        "c": reply(200, orjson.dumps(stray)),
    })  # fmt: skip
    result = await pipeline.handler(_call(config))
    assert result.vote == "2/2"
    c = next(r for r in pipeline.vote._registry.replicas() if r.id == "c")
    assert c.failures == 1 and "not the request's 'req-1'" in (c.last_error or "")

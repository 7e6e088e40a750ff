from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from gateway.config.policies import GoldenProbeConfig
from gateway.errors import BadRequest, UpstreamConnectError
from gateway.upstream.probes.golden import (
    GoldenSet,
    allowed_misses,
    check_golden_answer,
    golden_request,
    sample_rows,
)
from gateway.upstream.probes.golden_prober import GoldenProber
from gateway.upstream.registry import Registry
from gateway.upstream.transport.base import Reply
from gateway.v2.codec import decode_outputs
from replicas.faults import corrupt
from tests.gateway.conftest import make_config
from tests.gateway.fakes import Behaviour, FakeTransport, fail, reply
from tests.support.clock import FakeClock
from v2proto.codec import encode_infer_response, parse_infer_request

FALLBACK = Path(__file__).resolve().parents[4] / "fallback_models"
GOLDEN = GoldenSet.read(FALLBACK / "digits-golden.json")
SESSION = ort.InferenceSession(
    str(FALLBACK / "digits-logreg.onnx"), providers=["CPUExecutionProvider"]
)
MISSED = [29, 46, 47, 53, 63, 80]  # golden rows the logreg fallback gets wrong (0.94)


def run(rows: list[int]) -> dict[str, Any]:
    label, scores = SESSION.run(None, {"input": GOLDEN.inputs[rows]})
    return {"label": label, "probabilities": scores}


def test_the_golden_set() -> None:
    assert GOLDEN.inputs.shape == (100, 64) and GOLDEN.labels.shape == (100,)
    assert GOLDEN.min_accuracy == 0.9


def test_allowed_misses() -> None:
    assert [allowed_misses(n, 0.9) for n in (4, 8, 20, 100)] == [3, 4, 7, 20]
    assert allowed_misses(10, 1.0) == 0 and allowed_misses(10, 0.0) == 10


def test_a_healthy_model_passes_even_where_it_misses() -> None:
    rows = list(range(100))
    verdict = check_golden_answer(GOLDEN.labels, run(rows), rows, min_accuracy=0.9)
    assert verdict.passed and verdict.wrong == 6 and verdict.total == 100
    assert list(verdict.wrong_rows) == MISSED
    assert "6 of 100 rows wrong (29, 46, 47, 53, 63, 80)" in verdict.reason


def test_a_healthy_model_passes_every_sample() -> None:
    rng = random.Random(0)
    worst = sorted(MISSED + list(range(14)))  # every row it misses, in one 20-row probe
    samples = [sample_rows(GOLDEN, 20, rng) for _ in range(200)] + [worst]
    for rows in samples:
        verdict = check_golden_answer(GOLDEN.labels, run(rows), rows, min_accuracy=0.9)
        assert verdict.passed, verdict.reason


def test_corrupted_labels_fail() -> None:
    rows = list(range(8))  # rows the model gets right, so each corrupted label is wrong
    bad = corrupt(run(rows), random.Random(2))
    verdict = check_golden_answer(GOLDEN.labels, bad, rows, min_accuracy=0.9)
    assert not verdict.passed and verdict.wrong == 8
    assert verdict.reason.startswith("golden probe: 8 of 8 rows wrong")
    assert "at most 4 allowed at min accuracy 0.90" in verdict.reason


def test_scores_corrupted_behind_the_right_label_fail() -> None:
    rows = list(range(10))
    answer = run(rows)
    answer["probabilities"] = np.roll(answer["probabilities"], 1, axis=1)
    verdict = check_golden_answer(GOLDEN.labels, answer, rows, min_accuracy=0.9)
    assert not verdict.passed and verdict.wrong == 10
    nan = run(rows)
    nan["probabilities"][:, 0] = np.nan
    assert not check_golden_answer(GOLDEN.labels, nan, rows, min_accuracy=0.9).passed


def test_malformed_answers_fail() -> None:
    rows = [0, 1, 2]
    no_label = {"probabilities": run(rows)["probabilities"]}
    verdict = check_golden_answer(GOLDEN.labels, no_label, rows, min_accuracy=0.9)
    assert not verdict.passed and "no 'label' output" in verdict.reason
    short = {"label": np.zeros(2, dtype=np.int64)}
    assert not check_golden_answer(GOLDEN.labels, short, rows, min_accuracy=0.9).passed
    flat = {"label": run(rows)["label"], "probabilities": np.zeros(30, dtype=np.float32)}
    assert "shape [30]" in check_golden_answer(GOLDEN.labels, flat, rows, min_accuracy=0.9).reason


def test_labels_only_answers_are_judged_on_labels() -> None:
    rows = [0, 1, 2]
    verdict = check_golden_answer(
        GOLDEN.labels, {"label": GOLDEN.labels[rows]}, rows, min_accuracy=0.9
    )
    assert verdict.passed and verdict.wrong == 0


def test_probe_round_trip_through_the_v2_codec() -> None:
    rows = sample_rows(GOLDEN, 20, random.Random(3))
    request = golden_request(GOLDEN, rows)
    assert request.json_length is None  # plain JSON: every V2 server speaks it
    parsed = parse_infer_request(request.body)  # what a replica sees
    assert parsed.id == "golden-probe"
    np.testing.assert_array_equal(parsed.inputs["input"], GOLDEN.inputs[rows])
    label, scores = SESSION.run(None, dict(parsed.inputs))
    reply = encode_infer_response(
        "digits-logreg", "1", [("label", label, False), ("probabilities", scores, True)]
    )
    outputs = decode_outputs(reply.body, str(reply.json_length))
    verdict = check_golden_answer(GOLDEN.labels, outputs, rows, min_accuracy=0.9)
    assert verdict.passed and verdict.total == 20


def test_undecodable_replies() -> None:
    with pytest.raises(BadRequest, match="undecodable replica reply"):
        decode_outputs(b'{"outputs": []}', None)
    with pytest.raises(BadRequest):
        decode_outputs(b"<html>", None)


def test_sample_rows() -> None:
    rows = sample_rows(GOLDEN, 20, random.Random(0))
    assert rows == sorted(set(rows)) and len(rows) == 20
    assert sample_rows(GOLDEN, 500, random.Random(0)) == list(range(100))


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (reply(400, b'{"error": "unknown input \'input\'"}'), "answered 400: unknown input"),
        (reply(500, b'{"error": "boom"}'), "answered 500: boom"),
        (reply(200, b'{"outputs": "nope"}'), "no 'outputs' list"),
    ],
)
async def test_a_replica_refusing_golden_inputs_fails_its_probes(
    answer: Behaviour, reason: str
) -> None:
    """A golden input is known to be good: a refusal is the replica's fault (a black hole
    answering 4xx to everything is quarantined), unlike an unreachable replica (no verdict)."""
    config = make_config(replicas=2)
    pools = {
        name: pool.model_copy(
            update={"golden": GoldenProbeConfig(file=str(FALLBACK / "digits-golden.json"))}
        )
        for name, pool in config.pools.items()
    }
    registry = Registry(config.model_copy(update={"pools": pools}), FakeClock())
    transport = FakeTransport(
        {"127.0.0.1:9000": answer, "127.0.0.1:9001": fail(UpstreamConnectError("refused"))}
    )
    prober = GoldenProber(registry, transport, FakeClock(), random.Random(0))
    pool = registry.pools["p"]
    assert pool.config.golden is not None
    bad, unreachable = pool.replicas
    verdicts = [await prober.probe(pool, bad, pool.config.golden, GOLDEN) for _ in range(2)]
    assert verdicts == [False, False]
    assert bad.quarantined_until > 0 and reason in (bad.quarantine_reason or "")
    assert await prober.probe(pool, unreachable, pool.config.golden, GOLDEN) is None
    assert unreachable.quarantined_until == 0


def _right_answer(reply_id: str | None) -> Behaviour:
    """The logreg's (right) labels for the probe's rows, under ``reply_id``."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        label, scores = SESSION.run(None, dict(parse_infer_request(payload).inputs))
        outputs = [("label", label, False), ("probabilities", scores, False)]
        body = encode_infer_response("digits-logreg", "1", outputs, request_id=reply_id).body
        return Reply(200, {"content-type": "application/json"}, body)

    return behave


@pytest.mark.parametrize(
    ("reply_id", "echoes_id", "reason"),
    [
        (None, True, "the reply has no id"),  # could be any request's answer
        ("client-7", True, "is not the request's"),  # another request's answer
        ("client-7", False, "is not the request's"),  # wrong whatever the pool says
    ],
)
async def test_a_golden_answer_must_carry_the_probes_own_id(
    reply_id: str | None, echoes_id: bool, reason: str
) -> None:
    """Labels that happen to be right are still no verdict on the probe when the answer is not
    the probe's: each probe has its own id, and the answer must carry it."""
    config = make_config(replicas=1)
    golden = GoldenProbeConfig(file=str(FALLBACK / "digits-golden.json"))
    pools = {
        name: pool.model_copy(update={"golden": golden, "echoes_id": echoes_id})
        for name, pool in config.pools.items()
    }
    registry = Registry(config.model_copy(update={"pools": pools}), FakeClock())
    transport = FakeTransport({"127.0.0.1:9000": _right_answer(reply_id)})
    prober = GoldenProber(registry, transport, FakeClock(), random.Random(0))
    pool = registry.pools["p"]
    (replica,) = pool.replicas
    assert not await prober.probe(pool, replica, golden, GOLDEN)
    assert reason in (replica.golden_last or ""), replica.golden_last


async def test_a_pool_that_does_not_echo_ids_is_probed_on_its_labels() -> None:
    """Its id-less answers are judged on their labels (its connections carry one each)."""
    config = make_config(replicas=1)
    golden = GoldenProbeConfig(file=str(FALLBACK / "digits-golden.json"))
    pools = {
        name: pool.model_copy(update={"golden": golden, "echoes_id": False})
        for name, pool in config.pools.items()
    }
    registry = Registry(config.model_copy(update={"pools": pools}), FakeClock())
    transport = FakeTransport({"127.0.0.1:9000": _right_answer(None)})
    prober = GoldenProber(registry, transport, FakeClock(), random.Random(0))
    pool = registry.pools["p"]
    (replica,) = pool.replicas
    assert await prober.probe(pool, replica, golden, GOLDEN), replica.golden_last

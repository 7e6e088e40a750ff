"""Pools that speak another dialect: requests leave in the pool's names, answers come back in
the client's names, shapes and form; votes compare the same labels however they are shaped."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.config import parse_config
from gateway.config.tensors import TensorMapping
from gateway.outcome import OutcomeKind
from gateway.upstream.transport.base import Reply
from gateway.v2.codec import decode_outputs
from gateway.v2.request import parse_infer_request
from tests.gateway.fakes import Behaviour, reply
from tests.gateway.pipeline.rig import A, B, Rig
from tests.gateway.pipeline.votes import MODEL, by_pool, vote_call, vote_config

PEER = {
    "tensors": {
        "inputs": {"input": "input-0"},
        "outputs": {"label": {"name": "predict", "shape": [-1]}},
    },
    "binary_tensors": False,
}


def _peer(label_shape: list[int], seen: list[dict[str, Any]] | None = None) -> Behaviour:
    """A V2 server answering ``predict`` of ``label_shape`` (MLServer: [n, 1]), echoing the id."""

    async def behave(method: str, path: str, payload: bytes) -> Reply:
        request = orjson.loads(payload)
        if seen is not None:
            seen.append(request)
        rows = request["inputs"][0]["shape"][0]
        body = {
            "model_name": "digits",
            "id": request.get("id"),
            "outputs": [
                {"name": "predict", "datatype": "INT64", "shape": label_shape, "data": [7] * rows},
            ],
        }
        return Reply(200, {"content-type": "application/json"}, orjson.dumps(body))

    return behave


def _config(replicas: int = 2) -> Any:
    return parse_config(
        {
            "pools": {
                "p": {
                    "model": "digits",
                    "replicas": [
                        {"id": f"r{i}", "url": f"http://127.0.0.1:{9000 + i}"}
                        for i in range(replicas)
                    ],
                    **PEER,
                }
            },
            "models": {"digits": {"pool": "p"}},
        }
    )


def _call(rig: Rig, body: dict[str, Any]) -> Any:
    raw = orjson.dumps(body)
    return rig.call(body=raw, request=parse_infer_request(raw, None))


REQUEST = {
    "id": "c-1",
    "inputs": [{"name": "input", "shape": [2, 64], "datatype": "FP32", "data": [0.5] * 128}],
    "outputs": [{"name": "label", "parameters": {"binary_data": True}}],
}


async def test_the_pool_gets_its_names_and_the_client_its_own() -> None:
    seen: list[dict[str, Any]] = []
    rig = Rig(_config(replicas=1), {A: _peer([2, 1], seen)})
    result = await rig.pipeline.handler(_call(rig, REQUEST))
    [sent] = seen
    assert [t["name"] for t in sent["inputs"]] == ["input-0"]
    assert sent["outputs"] == [{"name": "predict"}] and sent["id"] == "c-1"  # JSON outputs
    assert result.header_length is not None  # the client asked for binary: it gets binary
    outputs = decode_outputs(result.body, result.header_length)
    assert list(outputs) == ["label"] and outputs["label"].tolist() == [7, 7]
    assert orjson.loads(result.body[: int(result.header_length)])["id"] == "c-1"


async def test_an_answer_that_does_not_map_is_the_replicas_protocol_error() -> None:
    rig = Rig(_config(), {A: _peer([3]), B: _peer([2, 1])})  # r0: 2 labels in a shape of 3
    rig.replica(1).outstanding = 50  # P2C tries r0 first
    call = _call(rig, REQUEST)
    result = await rig.pipeline.handler(call)
    assert result.served_by == "r1" and result.attempts == 2
    first = call.ledger.outcomes[0]
    assert first.kind is OutcomeKind.PROTOCOL_ERROR
    assert "does not map to the model's outputs" in first.detail
    assert rig.replica(0).failures == 1


async def test_a_vote_across_dialects_agrees_on_the_same_labels() -> None:
    """[n, 1] from one server and [n] from another are the same labels: no dissent."""
    config = vote_config()
    names_only = TensorMapping.model_validate({"outputs": {"label": "predict"}})  # no reshaping
    pools = {
        name: pool.model_copy(update={"tensors": names_only}) for name, pool in config.pools.items()
    }
    config = config.model_copy(update={"pools": pools})
    rig = Rig(config, by_pool({"a": _peer([1, 1]), "b": _peer([1]), "c": _peer([1, 1])}))
    result = await rig.pipeline.handler(vote_call(rig))
    assert result.vote == "3/3"
    assert decode_outputs(result.body, result.header_length)["label"].reshape(-1).tolist() == [7]
    assert rig.pipeline.suspects.to_json()[MODEL]["b"]["dissents"] == 0


async def test_a_plain_json_request_to_a_json_only_pool_goes_as_is() -> None:
    seen: list[bytes] = []

    async def record(method: str, path: str, payload: bytes) -> Reply:
        seen.append(payload)
        return await reply(200, b'{"model_name": "digits", "outputs": []}')(method, path, payload)

    config = _config(replicas=1)
    json_only = config.pools["p"].model_copy(update={"tensors": TensorMapping()})
    rig = Rig(config.model_copy(update={"pools": {"p": json_only}}), {A: record})
    plain = orjson.dumps({"inputs": REQUEST["inputs"]})
    await rig.pipeline.handler(rig.call(body=plain, request=parse_infer_request(plain, None)))
    assert seen == [plain]

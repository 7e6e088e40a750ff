"""A fallback that cannot answer its model's tensors is not counted ready, and never answers.

A pool over KServe (its metadata lists ``input-0`` and ``predict``) with digits-logreg
(``input``, ``label``) as fallback and no mapping used to say "ready: the fallback answers"
while each degraded request got the fallback's 400 "unknown input 'input-0'".
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import orjson

from gateway.api.app import GatewayApp
from gateway.config import parse_config
from gateway.control.runtime import Gateway
from gateway.upstream.transport.base import Reply
from tests.gateway.fakes import FakeTransport

KSERVE = {
    "name": "digits",
    "versions": ["1"],
    "platform": "",
    "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
    "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
}
KSERVE_NAMES = {"inputs": {"input-0": "input"}, "outputs": {"predict": "label"}}
ROW = [0.0, 3.0, 12.0, 16.0] * 16


async def _down(method: str, path: str, payload: bytes) -> Reply:
    """A KServe replica that lists its tensors but cannot serve (not ready, every infer 503)."""
    if method == "GET" and path == "/v2/models/digits":
        return Reply(200, {}, orjson.dumps(KSERVE))
    return Reply(503, {}, b'{"error": "model not ready"}')


async def _serve(tensors: dict[str, Any] | None) -> tuple[int, str | None, int, dict[str, Any]]:
    """Readiness (ready?, why) and one infer (status, body) with the pool down."""
    fallback: dict[str, Any] = {"model": "digits-logreg"}
    if tensors is not None:
        fallback["tensors"] = tensors
    config = parse_config(
        {
            "pools": {
                "kserve": {
                    "model": "digits",
                    "binary_tensors": False,
                    "replicas": [{"id": "ks-0", "url": "http://127.0.0.1:9000"}],
                }
            },
            "models": {"digits": {"pool": "kserve", "fallback": fallback}},
        }
    )
    gateway = Gateway(
        config, transport=FakeTransport({"127.0.0.1:9000": _down}), rng=random.Random(0)
    )
    await gateway.start()
    app = GatewayApp(gateway)
    try:
        model = config.models["digits"]
        await gateway.model_metadata("digits", model)  # what the warmer fetches after start
        [replica] = gateway.registry.pools["kserve"].replicas
        replica.mark_health(False)
        state = gateway.model_readiness(model)
        body = {"inputs": [{"name": "input-0", "shape": [1, 64], "datatype": "FP32", "data": ROW}]}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gw"
        ) as client:
            reply = await client.post("/v2/models/digits/infer", json=body)
        return int(state.ready), state.reason, reply.status_code, reply.json()
    finally:
        await gateway.stop()
        await app.parser.close()


async def test_a_fallback_without_the_models_names_is_not_ready_and_answers_nothing() -> None:
    ready, reason, status, doc = await _serve(None)
    assert not ready
    assert reason is not None and reason.endswith(
        "the fallback 'digits-logreg' cannot: its tensors do not fit the model's: no input "
        "'input-0'; its inputs: input (map the model's under fallback.tensors.inputs)"
    )
    assert status == 503, doc  # the primary's error: the client's request was right
    assert "unknown input" not in doc["error"]


async def test_the_same_fallback_mapped_to_the_models_names_is_ready_and_answers() -> None:
    ready, reason, status, doc = await _serve(KSERVE_NAMES)
    assert ready and reason is not None and "the fallback 'digits-logreg' answers" in reason
    assert status == 200, doc
    assert [o["name"] for o in doc["outputs"]] == ["predict", "probabilities"]

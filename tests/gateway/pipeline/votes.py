"""A three-pool vote model and its answers, for the vote and fallback tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from gateway.call import InferCall
from gateway.clock import Clock
from gateway.config import GatewayConfig, parse_config
from gateway.fallback.model import FallbackModel
from gateway.v2.request import parse_infer_request
from tests.gateway.fakes import Behaviour
from tests.gateway.pipeline.rig import Rig

MANIFEST = Path(__file__).resolve().parents[3] / "fallback_models" / "MANIFEST.json"
PORTS = {"a": 9100, "b": 9200, "c": 9300}
MODEL = "digits-vote"


def answer(label: int, top: float = 0.9) -> bytes:
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


def vote_config(vote: dict[str, Any] | None = None, **model: Any) -> GatewayConfig:
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
            "models": {
                MODEL: {"vote": {"pools": list(PORTS), "quorum": 2, **(vote or {})}, **model}
            },
        }
    )


def by_pool(behaviours: dict[str, Behaviour]) -> dict[str, Behaviour]:
    """Behaviours keyed by pool name ("a", "b", "c") to the transport's authorities."""
    return {f"127.0.0.1:{PORTS[k]}": v for k, v in behaviours.items()}


async def verified_fallback(clock: Clock) -> FallbackModel:
    model = FallbackModel(MANIFEST, "digits-logreg", clock)
    await model.verify()
    return model


def vote_call(
    rig: Rig, outputs: list[dict[str, Any]] | None = None, timeout_s: float = 2.0
) -> InferCall:
    request: dict[str, Any] = {
        "id": "req-1",
        "inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": [0.0] * 64}],
    }
    if outputs is not None:
        request["outputs"] = outputs
    body = orjson.dumps(request)
    return rig.call(timeout_s, model=MODEL, body=body, request=parse_infer_request(body, None))

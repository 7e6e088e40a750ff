"""The gateway runs without the replica server and without the model build's or the load
tests' dependencies.

`lint-imports` checks the static import graph (pyproject.toml); these tests check what a real
start imports, dynamic imports included, in an interpreter where those packages cannot load:
so `pip install v2-gateway[cpu]` (no `build` or `load` extra) is a working gateway, and a
sidecar image need not carry scikit-learn, skl2onnx, onnx or aiohttp.
"""

from __future__ import annotations

import pytest

from tests.support.blocked_imports import LOAD, MODEL_BUILD, report, run_without

BLOCKED = (*MODEL_BUILD, *LOAD, "replicas")

START = """
import asyncio, pkgutil, importlib
import gateway
import gateway.cli
from gateway.api.app import GatewayApp
from gateway.config import load_config
from gateway.runtime import Gateway

for module in pkgutil.walk_packages(gateway.__path__, "gateway."):
    importlib.import_module(module.name)

async def start(path):
    gateway = Gateway(load_config(path))
    GatewayApp(gateway, config_path=path)
    verdicts = [await model.verify() for model in gateway.fallback_models.values()]
    assert verdicts and all(v.ok for v in verdicts), verdicts
    model = next(iter(gateway.fallback_models.values()))
    from gateway.v2.codec import decode_inputs, encode_outputs
    body = b'{"inputs": [{"name": "input", "shape": [1, 64], "datatype": "FP32", "data": %s}]}'
    inputs = decode_inputs(body % str([0.0] * 64).encode(), None)
    outputs = await model.infer(inputs)
    encode_outputs("digits", "1", [(n, a, False) for n, a in outputs.items()], None)

asyncio.run(start(__CONFIG__))
"""


@pytest.mark.parametrize("config", ["config/local.yaml", "config/sidecar.yaml"])
def test_gateway_starts_without_replicas_or_model_build_packages(config: str) -> None:
    result = run_without(BLOCKED, START.replace("__CONFIG__", repr(config)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert report(result) == {"attempts": [], "loaded": []}

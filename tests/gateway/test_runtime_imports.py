"""The gateway runs without the replica server and without the model build's or the load
tests' dependencies.

`lint-imports` checks the static import graph (pyproject.toml); these tests check what a real
start imports, dynamic imports included, in an interpreter where those packages cannot load:
so `pip install v2-gateway[cpu]` (no `build` or `load` extra) is a working gateway, and a
sidecar image need not carry scikit-learn, skl2onnx, onnx or aiohttp. Without onnxruntime (the
base install) a gateway without a fallback starts, and one with a fallback is refused at start
with the extra to install.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.blocked_imports import LOAD, MODEL_BUILD, report, run_without

BLOCKED = (*MODEL_BUILD, *LOAD, "replicas")

START = """
import asyncio, pkgutil, importlib
import gateway
import gateway.cli
from gateway.api.app import GatewayApp
from gateway.config import load_config
from gateway.control.runtime import Gateway

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


NO_FALLBACK = {
    "pools": {"p": {"model": "digits", "replicas": [{"id": "a", "url": "http://127.0.0.1:9"}]}},
    "models": {"digits": {"pool": "p"}},
}

BUILD = """
import pkgutil, importlib
import gateway
from gateway.api.app import GatewayApp
from gateway.config import load_config
from gateway.control.preflight import config_problems
from gateway.control.runtime import Gateway

for module in pkgutil.walk_packages(gateway.__path__, "gateway."):
    importlib.import_module(module.name)
config = load_config(__CONFIG__)
assert config_problems(config) == [], config_problems(config)
GatewayApp(Gateway(config), config_path=__CONFIG__)
"""


def test_without_onnxruntime_a_gateway_without_a_fallback_is_whole(tmp_path: Path) -> None:
    """No module imports onnxruntime until a fallback loads: the base install is a gateway."""
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(NO_FALLBACK))
    result = run_without((*BLOCKED, "onnxruntime"), BUILD.replace("__CONFIG__", repr(str(path))))
    assert result.returncode == 0, result.stderr[-3000:]
    assert report(result) == {"attempts": [], "loaded": []}


def test_without_onnxruntime_a_fallback_is_refused_at_start_naming_the_extra() -> None:
    code = """
from gateway.cli import main
print("RC", main(["serve", "--config", "config/local.yaml"]))
"""
    result = run_without(("onnxruntime",), code)
    assert "RC 2" in result.stdout, result.stderr[-3000:]
    assert (
        "models.digits.fallback.model: 'digits-logreg': a fallback needs onnxruntime, which is "
        "not installed: install the gateway's 'cpu' extra: pip install 'v2-gateway[cpu]'"
    ) in result.stderr


def test_without_onnxruntime_a_fallback_that_loads_anyway_is_refused_naming_the_extra() -> None:
    """A fallback built without the start checks (an app embedding `Gateway`, an onnxruntime
    found but failing to import) is refused by its own check, with the same advice."""
    code = """
from gateway.fallback.check import check_model
from gateway.fallback.manifest import configured_manifest
verdict, loaded = check_model(configured_manifest(None), "digits-logreg")
print("VERDICT", verdict.ok, loaded, verdict.reason)
"""
    result = run_without(("onnxruntime",), code)
    assert "VERDICT False None cannot load it: " in result.stdout, result.stderr[-3000:]
    assert "pip install 'v2-gateway[cpu]'" in result.stdout

"""`config_problems`: every missing file and unknown fallback named, before any gateway is built."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from gateway.config import parse_config
from gateway.control.preflight import config_problems

REPO = Path(__file__).resolve().parents[3]
GOLDEN = str(REPO / "fallback_models" / "digits-golden.json")


def config(pool: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {
        "pools": {
            "p": {
                "model": "m",
                "replicas": [{"id": "a", "url": "http://127.0.0.1:1"}],
                **(pool or {}),
            }
        },
        "models": {"d": {"pool": "p", "fallback": {"model": "digits-logreg"}}},
        **top,
    }


def test_a_whole_config_has_no_problems() -> None:
    assert config_problems(parse_config(config({"golden": {"file": GOLDEN}}))) == []


def test_every_problem_is_named(tmp_path: Path) -> None:
    data = config(
        {"golden": {"file": str(tmp_path / "gone.json")}, "local": {"model_path": "/no/m.onnx"}},
        server={"admin": {"key_file": str(tmp_path / "admin.keys")}},
        tenants={"t": {"keys_file": str(tmp_path / "t.keys")}},
    )
    data["models"]["e"] = {"pool": "p", "fallback": {"model": "no-such-model"}}
    problems = config_problems(parse_config(data))
    assert problems == [
        f"server.admin.key_file: no such file: {tmp_path / 'admin.keys'}",
        "pools.p.local.model_path: no such file: /no/m.onnx",
        f"pools.p.golden.file: no such file: {tmp_path / 'gone.json'}",
        f"tenants.t.keys_file: no such file: {tmp_path / 't.keys'}",
        "models.e.fallback.model: 'no-such-model': no model named 'no-such-model' in the "
        f"manifest ({REPO / 'gateway' / 'fallback' / 'models' / 'MANIFEST.json'})",
    ]


def test_an_unreadable_golden_set_and_a_fallback_missing_its_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    shutil.copy(REPO / "fallback_models" / "MANIFEST.json", tmp_path / "MANIFEST.json")
    data = config({"golden": {"file": str(bad)}}, fallback_manifest=str(tmp_path / "MANIFEST.json"))
    problems = config_problems(parse_config(data))
    assert problems[0].startswith(f"pools.p.golden.file: cannot read golden set {bad}")
    assert problems[1:] == [
        f"models.d.fallback.model: 'digits-logreg': its model {tmp_path / 'digits-logreg.onnx'} "
        "does not exist",
        f"models.d.fallback.model: 'digits-logreg': its golden set "
        f"{tmp_path / 'digits-golden.json'} does not exist",
    ]


def test_a_missing_manifest_is_named(tmp_path: Path) -> None:
    data = config(fallback_manifest=str(tmp_path / "MANIFEST.json"))
    (problem,) = config_problems(parse_config(data))
    assert problem.startswith("models.d.fallback.model: 'digits-logreg': cannot read manifest")


def test_a_fallback_that_cannot_answer_the_declared_signature_is_a_problem() -> None:
    """KServe's names, declared, with digits-logreg (input, label) and no mapping: refused."""
    data = config()
    signature = {
        "inputs": [{"name": "input-0", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "predict", "datatype": "INT64", "shape": [-1]}],
    }
    data["models"]["d"]["signature"] = signature
    assert config_problems(parse_config(data)) == [
        "models.d.fallback: 'digits-logreg' cannot answer the model's signature: no input "
        "'input-0'; its inputs: input (map the model's under fallback.tensors.inputs)"
    ]
    names = {"inputs": {"input-0": "input"}, "outputs": {"predict": "label"}}
    data["models"]["d"]["fallback"]["tensors"] = names
    assert config_problems(parse_config(data)) == []
